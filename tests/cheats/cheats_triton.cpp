// tests/cheats/cheats_triton.cpp — a cheat fixture that calls a Triton kernel compiled
// ahead of time: lesson 01's vector-add launcher (vector_add_triton.py), as the real
// `triton` impl of vector_add calls it, but on n - 5 elements. The last 5 outputs keep the
// harness's poison, so `klab-cheats test` fails it (and bench's re-check of the last timed
// output). It shows that an impl whose kernel comes from another compiler goes through the
// same checks. Built only where the Triton kernels are (KLAB_HAVE_TRITON).
#if KLAB_HAVE_TRITON
#include <cuda.h>

#include <cstdint>
#include <string>

#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#include "vector_add_triton.h"

namespace {

void run_tail_skipped(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0] - 5;
  if (n <= 0) return;
  klab::triton_prepare();
  KLAB_CHECK_CU(tr_vector_add_f32_default(l.stream, reinterpret_cast<CUdeviceptr>(l.in[0].data),
                                          reinterpret_cast<CUdeviceptr>(l.in[1].data),
                                          reinterpret_cast<CUdeviceptr>(l.out[0].data), n));
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "vector_add",
                                   .name = "cheat_triton_tail",
                                   .summary = "cheat: lesson 01's Triton kernel on all but the last 5 elements",
                                   .kind = klab::ImplKind::triton,
                                   .supports = [](const klab::Problem& p) {
                                     if (p.dtype != klab::DType::f32) return std::string("the Triton vector add is built for f32");
                                     return klab::triton_supported();
                                   },
                                   .run = run_tail_skipped}));
#endif
