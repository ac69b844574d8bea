// lessons/08-layernorm/layernorm_cudnn.cu — the vendor baseline: cuDNN's layernorm, forward
// and backward, through the cuDNN frontend's graph API (a graph of one layernorm node,
// training phase: y, mean and inverse standard deviation out; its backward node: dx,
// dscale, dbias from the saved mean and inverse standard deviation).
//
// Impls registered here (the same impl name for two ops):
//   cudnn  layernorm:           graph.layernorm(x, gamma, beta), epsilon 1e-5
//          layernorm_backward:  graph.layernorm_backward(dy, x, gamma) with the saved
//                               mean and rstd (cuDNN's "inverse variance" is rstd)
//
// Built only when CMake found cuDNN 9 and the frontend's headers (the PyPI package
// nvidia-cudnn-frontend, which tools/setup.sh installs into .venv beside Triton): the impls
// are registered either way, and without them supports() says why. A graph is built and
// its plan chosen (cuDNN's heuristics, mode A) once a problem, on first use, outside the timed
// launches; a problem cuDNN does not support is reported unsupported with cuDNN's reason.
// The settings: fp32 compute and intermediates, tensors in the op's dtype, mean, rstd and
// the parameter gradients in fp32.
//
// Run:  klab run 08 --impl v2_block_registers,cudnn      klab bench 08 --op layernorm_backward
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include "klab/error.hpp"
#include "klab/op.hpp"
#include "layernorm.cuh"

#if KLAB_HAVE_CUDNN_FRONTEND
#include "klab/cudnn_frontend.hpp"
#endif

namespace lesson08 {
namespace {

#if KLAB_HAVE_CUDNN_FRONTEND
namespace fe = cudnn_frontend;
using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;

// A built graph, its tensors in the order the launch binds them, and the workspace it
// needs; or, where cuDNN refused the problem, why.
struct Built {
  fe::graph::Graph graph;
  std::vector<Tensor> tensors;   // forward: x, gamma, beta, y, mean, rstd; backward: x, gamma, dy, mean, rstd, dx, dgamma, dbeta
  std::int64_t workspace = 0;
  std::string why;               // "" when built
};

// A (rows, cols) tensor, row-major, as cuDNN's 4-d (N, C, H, W) = (rows, cols, 1, 1).
Tensor tensor(fe::graph::Graph& g, const char* name, std::int64_t rows, std::int64_t cols, fe::DataType_t t) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_dim({rows, cols, 1, 1})
                      .set_stride({cols, 1, cols, cols})
                      .set_data_type(t));
}

fe::DataType_t fe_type(klab::DType t) { return t == klab::DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::FLOAT; }

// The built graph of a problem, made once (thread-safe: the harness may ask from supports()
// and run()). BACKWARD: layernorm_backward's graph, else the forward's.
template <bool BACKWARD>
Built* built_for(const klab::Problem& p) {
  static std::mutex m;
  static std::map<std::tuple<std::int64_t, std::int64_t, int>, std::unique_ptr<Built>> cache;
  const std::lock_guard<std::mutex> lock(m);
  auto& slot = cache[{p.shape[0], p.shape[1], static_cast<int>(p.dtype)}];
  if (slot) return slot.get();
  slot = std::make_unique<Built>();
  Built& b = *slot;
  const std::int64_t rows = p.shape[0], cols = p.shape[1];
  const fe::DataType_t t = fe_type(p.dtype);
  auto& g = b.graph;
  g.set_io_data_type(t).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
  const Tensor x = tensor(g, "x", rows, cols, t), gamma = tensor(g, "gamma", 1, cols, t);
  if constexpr (!BACKWARD) {
    const Tensor beta = tensor(g, "beta", 1, cols, t);
    auto [y, mean, rstd] = g.layernorm(
        x, gamma, beta, fe::graph::Layernorm_attributes().set_forward_phase(fe::NormFwdPhase_t::TRAINING).set_epsilon(kEps));
    y->set_output(true);
    mean->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    rstd->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    b.tensors = {x, gamma, beta, y, mean, rstd};
  } else {
    const Tensor dy = tensor(g, "dy", rows, cols, t);
    const Tensor mean = tensor(g, "mean", rows, 1, fe::DataType_t::FLOAT);
    const Tensor rstd = tensor(g, "rstd", rows, 1, fe::DataType_t::FLOAT);
    auto [dx, dgamma, dbeta] = g.layernorm_backward(
        dy, x, gamma, fe::graph::Layernorm_backward_attributes().set_saved_mean_and_inv_variance(mean, rstd));
    dx->set_output(true);
    dgamma->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    dbeta->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    b.tensors = {x, gamma, dy, mean, rstd, dx, dgamma, dbeta};
  }
  b.why = klab::cudnn_fe_build(b.graph, b.workspace);
  return slot.get();
}
#endif

template <bool BACKWARD>
std::string supports_cudnn(const klab::Problem& p) {
#if KLAB_HAVE_CUDNN_FRONTEND
  if (p.shape[0] == 0) return "cuDNN takes no empty tensor";
  const Built* b = built_for<BACKWARD>(p);
  return b->why.empty() ? "" : "cuDNN: " + b->why;
#else
  (void)p;
  return "built without the cuDNN frontend (tools/setup.sh venv installs nvidia-cudnn-frontend; cuDNN 9 must be found too)";
#endif
}

template <bool BACKWARD>
std::size_t workspace_cudnn(const klab::Problem& p) {
#if KLAB_HAVE_CUDNN_FRONTEND
  if (p.shape[0] == 0) return 0;
  const Built* b = built_for<BACKWARD>(p);
  return b->why.empty() ? static_cast<std::size_t>(b->workspace) : 0;
#else
  (void)p;
  return 0;
#endif
}

template <bool BACKWARD>
void run_cudnn(const klab::Launch& l) {
#if KLAB_HAVE_CUDNN_FRONTEND
  const Built* b = built_for<BACKWARD>(l.problem);
  KLAB_REQUIRE(b->why.empty(), "cudnn: " + b->why);
  cudnnHandle_t h = klab::cudnn_handle();
  KLAB_CHECK_CUDNN(cudnnSetStream(h, l.stream));
  // The launch's tensors in the order built_for listed them: the op's inputs, then its outputs.
  std::unordered_map<Tensor, void*> pack;
  std::size_t k = 0;
  for (const auto& t : l.in) pack[b->tensors[k++]] = t.data;
  for (const auto& t : l.out) pack[b->tensors[k++]] = t.data;
  if (auto e = b->graph.execute(h, pack, l.workspace); e.is_bad()) KLAB_REQUIRE(false, "cudnn: " + e.get_message());
#else
  (void)l;
#endif
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "layernorm", .name = "cudnn",
                                   .summary = "cuDNN's layernorm through the frontend's graph API (training phase)",
                                   .kind = klab::ImplKind::vendor,
                                   .supports = supports_cudnn<false>,
                                   .workspace = workspace_cudnn<false>,
                                   .run = run_cudnn<false>}));
KLAB_REGISTER(klab::register_impl({.op = "layernorm_backward", .name = "cudnn",
                                   .summary = "cuDNN's layernorm backward through the frontend's graph API",
                                   .kind = klab::ImplKind::vendor,
                                   .supports = supports_cudnn<true>,
                                   .workspace = workspace_cudnn<true>,
                                   .run = run_cudnn<true>}));

}  // namespace lesson08
