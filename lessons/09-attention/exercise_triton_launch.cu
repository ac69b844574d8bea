// Lesson 09, Triton track — the C++ side of the Triton exercise (exercise_triton.py).
//
// Impl registered here (op `attention_fwd`, bf16 and f16, head dims 64 and 128, causal and not):
//   exercise_triton   the learner's Triton flash attention forward, one program per 128 query
//                     rows of a (batch, head), compiled ahead of time from exercise_triton.py;
//                     graded by `klab check 09 --triton` against `triton`
//
// The learner edits only the .py (cmake/KlabLesson.cmake builds it, its solution and each
// TODO variant beside a copy of this file). The generated launchers
// tr_ex_attention_<dtype>_d<D>_default take (B · Hq, Hq, Hkv, Sq, Sk, causal, scale_log2),
// the arguments run_triton in attention_triton_impl.cu passes to `triton`, and launch GRID,
// the C expression the learner writes. This file picks the launcher by dtype and head dim.
//
// Run:  klab check 09 --triton       klab run 09 --impl exercise_triton,triton
#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "attention.cuh"
#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#if KLAB_HAVE_TRITON
#include "exercise_triton.h"
#endif

namespace {

void run_exercise_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const lesson09::AttnArgs a = lesson09::attn_args(l);
  if (static_cast<lesson09::i64>(a.B) * a.Hq * a.Sq == 0) return;   // no query row: a grid of zero programs
  klab::triton_prepare();
  const auto ptr = [](const void* q) { return reinterpret_cast<CUdeviceptr>(q); };
  const CUstream s = reinterpret_cast<CUstream>(a.stream);
  const CUdeviceptr q = ptr(a.q), k = ptr(a.k), v = ptr(a.v), o = ptr(a.o), lse = ptr(a.lse);
  const int32_t bh = a.B * a.Hq, causal = a.causal ? 1 : 0;
  // log2(e) / sqrt(d): the scores go into base 2 by one multiply, exp is one exp2.
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(a.d)));
  const bool bf16 = l.problem.dtype == klab::DType::bf16;
  if (a.d == 64)
    KLAB_CHECK_CU(bf16 ? tr_ex_attention_bf16_d64_default(s, q, k, v, o, lse, bh, a.Hq, a.Hkv, a.Sq, a.Sk, causal, scale_log2)
                       : tr_ex_attention_f16_d64_default(s, q, k, v, o, lse, bh, a.Hq, a.Hkv, a.Sq, a.Sk, causal, scale_log2));
  else
    KLAB_CHECK_CU(bf16 ? tr_ex_attention_bf16_d128_default(s, q, k, v, o, lse, bh, a.Hq, a.Hkv, a.Sq, a.Sk, causal, scale_log2)
                       : tr_ex_attention_f16_d128_default(s, q, k, v, o, lse, bh, a.Hq, a.Hkv, a.Sq, a.Sk, causal, scale_log2));
#else
  (void)l;
#endif
}

// The kernel's row of O is (D,) with D a constexpr (64 or 128); the programs are one grid
// axis; the row counts B · Hq · Sq and B · Hkv · Sk are 32-bit before the kernel widens them;
// Q's tile and three stages of K and V take 64 KB (D = 64) or 128 KB (D = 128) of shared memory.
std::string exercise_triton_supports(const klab::Problem& p) {
  const lesson09::Shape s = lesson09::shape_of(p);
  if (s.d != 64 && s.d != 128) return "head dim d = " + std::to_string(s.d) + ": the exercise is compiled for d = 64 and 128";
  constexpr std::int64_t kMax = std::numeric_limits<int32_t>::max();
  if (s.B * s.Hq * ((s.Sq + 127) / 128) > kMax) return "more than 2^31 - 1 programs of 128 query rows";
  if (s.B * s.Hq * s.Sq > kMax || s.B * s.Hkv * s.Sk > kMax) return "more than 2^31 - 1 rows of Q or of K";
  if (std::string why = klab::triton_supported(); !why.empty()) return why;
  const std::size_t need = static_cast<std::size_t>(128 + 2 * 3 * 64) * static_cast<std::size_t>(s.d) * 2;
  if (klab::device_info().smem_per_block_optin < need)
    return "the exercise's tiles need " + std::to_string(need / 1024) + " KB of shared memory a block, the device has " +
           std::to_string(klab::device_info().smem_per_block_optin / 1024);
  return "";
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "attention_fwd", .name = "exercise_triton",
                                   .summary = "your Triton flash attention forward, 128 query rows a program "
                                              "(exercise_triton.py)",
                                   .kind = klab::ImplKind::exercise, .supports = exercise_triton_supports,
                                   .run = run_exercise_triton, .built_from = KLAB_TRITON_EXERCISE_PY}));
