// klab/cudnn_frontend.hpp — what the cuDNN frontend baselines share (lesson 08's layernorm,
// lesson 09's attention): the frontend's headers, included the one way that compiles here,
// and a graph's build from validation to its plan. Include it only in a source that CMake
// gives KLAB_HAVE_CUDNN_FRONTEND (klab_lesson_cudnn's FRONTEND list, cmake/KlabCudnn.cmake).
#pragma once

#define CUDNN_FRONTEND_SKIP_JSON_LIB 1
#include <cudnn.h>

#include <cstdint>
#include <cstring>   // the frontend's headers call std::strlen without including it
#include <string>

#include <cudnn_frontend.h>

#include "klab/cudnn.hpp"

namespace klab {

// Validates a graph, builds it, picks its plan from cuDNN's heuristics (mode A) and reads the
// workspace it needs. Returns "" when built, else cuDNN's reason for refusing it (which the
// baselines' supports() report: a problem cuDNN does not take is unsupported, not an error).
inline std::string cudnn_fe_build(cudnn_frontend::graph::Graph& g, std::int64_t& workspace) {
  cudnnHandle_t h = cudnn_handle();
  for (auto step : {g.validate(), g.build_operation_graph(h), g.create_execution_plans({cudnn_frontend::HeurMode_t::A}),
                    g.check_support(h), g.build_plans(h)})
    if (step.is_bad()) return step.get_message().empty() ? std::string("cuDNN refused the graph") : step.get_message();
  if (auto e = g.get_workspace_size(workspace); e.is_bad()) return e.get_message();
  return "";
}

}  // namespace klab
