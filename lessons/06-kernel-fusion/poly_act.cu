// Lesson 06 — y = c0 + c1·x + c2·x² + c3·x³, the polynomial written as an eager framework
// runs it against one kernel in Horner form. The coefficients are the op's scalars
// (pointwise_ops.cu: drawn from the seed, fp32 values).
//
//   v1_per_term      what eager PyTorch runs for `c0 + c1*x + c2*x**2 + c3*x**3`: one kernel
//                    per operator, in Python's evaluation order, every intermediate written
//                    to memory in the tensor's dtype and read back by the next:
//                      t1 = c1·x, s1 = t1 + c0, x2 = x², t2 = c2·x2, s2 = s1 + t2,
//                      x3 = x³, t3 = c3·x3, y = s2 + t3          (8 kernels)
//                    The intermediates live in three workspace buffers, reused as a caching
//                    allocator reuses freed blocks (three are alive at once, at t2).
//   v2_fused_horner  one kernel: x read once, y written once, ((c3·x + c2)·x + c1)·x + c0 in
//                    fp32 registers, three fmaf; 16-byte vectors, a grid-stride loop
//                    (map_vec16, fusion.cuh).
//   triton           poly_act_triton.py: the same Horner form (tl.fma) in Triton, compiled
//                    ahead of time.
//
// Bytes per element (4 bytes f32, 2 bf16): v1's kernels read 10 tensors (x four times, t1,
// x2, s1 and t2, x3, s2 and t3) and write 8, 18 in all; v2 reads x and writes y, 2. Both
// are bandwidth-bound, so v1 should take about 9x v2's time, plus seven more launches. The
// bench's GB/s counts the op's minimal 2, so v1 shows at most 1/9 of the copy bandwidth.
//
//   klab test 06 --op poly_act
//   klab bench 06 --op poly_act
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "fusion.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#if KLAB_HAVE_TRITON
#include "poly_act_triton.h"
#endif

namespace lesson06 {
namespace {

using std::int64_t;

constexpr int kThreads = 256;

// ======================================================================================
// v1_per_term: one kernel per operator (each reads its operands, computes in fp32, and
// stores its result rounded to T, as an eager framework's element-wise kernels do)
// ======================================================================================
template <class T>
__global__ void poly_act_v1_per_term_mul_scalar(const T* __restrict__ g_x, T* __restrict__ g_y, float c, int64_t n) {
  map_vec16<T, 1>(g_x, nullptr, nullptr, g_y, n, [c](float x, float, float) { return c * x; });
}
template <class T>
__global__ void poly_act_v1_per_term_add_scalar(const T* __restrict__ g_x, T* __restrict__ g_y, float c, int64_t n) {
  map_vec16<T, 1>(g_x, nullptr, nullptr, g_y, n, [c](float x, float, float) { return x + c; });
}
// x**P for P = 2 or 3, in fp32 (x·x, x·x·x) and rounded once to T.
template <class T, int P>
__global__ void poly_act_v1_per_term_pow(const T* __restrict__ g_x, T* __restrict__ g_y, int64_t n) {
  static_assert(P == 2 || P == 3, "the polynomial's powers");
  map_vec16<T, 1>(g_x, nullptr, nullptr, g_y, n, [](float x, float, float) { return P == 2 ? x * x : x * x * x; });
}
template <class T>
__global__ void poly_act_v1_per_term_add(const T* __restrict__ g_a, const T* __restrict__ g_b, T* __restrict__ g_y,
                                         int64_t n) {
  map_vec16<T, 2>(g_a, g_b, nullptr, g_y, n, [](float a, float b, float) { return a + b; });
}

// ======================================================================================
// v2_fused_horner
// ======================================================================================
template <class T>
__global__ void poly_act_v2_fused_horner(const T* __restrict__ g_x, T* __restrict__ g_y, float c0, float c1,
                                         float c2, float c3, int64_t n) {
  map_vec16<T, 1>(g_x, nullptr, nullptr, g_y, n,
                  [=](float x, float, float) { return fmaf(fmaf(fmaf(c3, x, c2), x, c1), x, c0); });
}

// ======================================================================================
// Launchers
// ======================================================================================
int64_t numel(const klab::Problem& p) { return p.shape[0] * p.shape[1]; }
unsigned blocks(int64_t n, klab::DType t) { return klab::grid_stride_blocks(n / (16 / klab::dtype_size(t)) + 1, kThreads); }

// One intermediate tensor in the workspace, rounded up to 256 bytes so that each of the
// three starts a 16-byte vector (the harness's workspace is 256-byte aligned).
std::size_t buffer_bytes(const klab::Problem& p) {
  return (static_cast<std::size_t>(numel(p)) * klab::dtype_size(p.dtype) + 255) / 256 * 256;
}
std::size_t workspace_v1_per_term(const klab::Problem& p) { return 3 * buffer_bytes(p); }

// The coefficients are fp32 values (the op's generator rounds them), so the float casts are exact.
struct Coeffs {
  float c0, c1, c2, c3;
};
Coeffs coeffs(const klab::Launch& l) {
  return {static_cast<float>(l.scalars.at(0)), static_cast<float>(l.scalars.at(1)),
          static_cast<float>(l.scalars.at(2)), static_cast<float>(l.scalars.at(3))};
}

void run_v1_per_term(const klab::Launch& l) {
  const int64_t n = numel(l.problem);
  if (n == 0) return;
  const Coeffs c = coeffs(l);
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    auto* ws = static_cast<unsigned char*>(l.workspace);
    const std::size_t b = buffer_bytes(l.problem);
    T *w0 = reinterpret_cast<T*>(ws), *w1 = reinterpret_cast<T*>(ws + b), *w2 = reinterpret_cast<T*>(ws + 2 * b);
    const T* x = l.in[0].as<const T>();
    T* y = l.out[0].as<T>();
    const unsigned g = blocks(n, l.problem.dtype);
    poly_act_v1_per_term_mul_scalar<T><<<g, kThreads, 0, l.stream>>>(x, w0, c.c1, n);   // t1 = c1·x
    KLAB_CHECK_LAUNCH();
    poly_act_v1_per_term_add_scalar<T><<<g, kThreads, 0, l.stream>>>(w0, w1, c.c0, n);  // s1 = t1 + c0
    KLAB_CHECK_LAUNCH();
    poly_act_v1_per_term_pow<T, 2><<<g, kThreads, 0, l.stream>>>(x, w0, n);             // x2 = x²
    KLAB_CHECK_LAUNCH();
    poly_act_v1_per_term_mul_scalar<T><<<g, kThreads, 0, l.stream>>>(w0, w2, c.c2, n);  // t2 = c2·x2
    KLAB_CHECK_LAUNCH();
    poly_act_v1_per_term_add<T><<<g, kThreads, 0, l.stream>>>(w1, w2, w0, n);           // s2 = s1 + t2
    KLAB_CHECK_LAUNCH();
    poly_act_v1_per_term_pow<T, 3><<<g, kThreads, 0, l.stream>>>(x, w1, n);             // x3 = x³
    KLAB_CHECK_LAUNCH();
    poly_act_v1_per_term_mul_scalar<T><<<g, kThreads, 0, l.stream>>>(w1, w2, c.c3, n);  // t3 = c3·x3
    KLAB_CHECK_LAUNCH();
    poly_act_v1_per_term_add<T><<<g, kThreads, 0, l.stream>>>(w0, w2, y, n);            // y = s2 + t3
    KLAB_CHECK_LAUNCH();
  });
}

void run_v2_fused_horner(const klab::Launch& l) {
  const int64_t n = numel(l.problem);
  if (n == 0) return;
  const Coeffs c = coeffs(l);
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    poly_act_v2_fused_horner<T><<<blocks(n, l.problem.dtype), kThreads, 0, l.stream>>>(
        l.in[0].as<const T>(), l.out[0].as<T>(), c.c0, c.c1, c.c2, c.c3, n);
    KLAB_CHECK_LAUNCH();
  });
}

// The Triton kernel takes its size as one int64 and its dtype from the launcher's name.
std::string triton_supports(const klab::Problem&) { return klab::triton_supported(); }

void run_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const int64_t n = numel(l.problem);
  if (n == 0) return;
  klab::triton_prepare();
  const Coeffs c = coeffs(l);
  const auto x = reinterpret_cast<CUdeviceptr>(l.in[0].data), y = reinterpret_cast<CUdeviceptr>(l.out[0].data);
  if (l.problem.dtype == klab::DType::f32) KLAB_CHECK_CU(tr_poly_act_f32_default(l.stream, x, y, n, c.c0, c.c1, c.c2, c.c3));
  else KLAB_CHECK_CU(tr_poly_act_bf16_default(l.stream, x, y, n, c.c0, c.c1, c.c2, c.c3));
#else
  (void)l;
#endif
}

}  // namespace

// v1's own tolerance: its roundings to T (pointwise_ops.cu derives it).
KLAB_REGISTER(klab::register_impl({.op = "poly_act", .name = "v1_per_term",
                                   .summary = "eager: 8 kernels, x^2, x^3 and every partial term written and read back",
                                   .kind = klab::ImplKind::cuda, .workspace = workspace_v1_per_term,
                                   .run = run_v1_per_term, .tolerance = poly_act_v1_tolerance}));
KLAB_REGISTER(klab::register_impl({.op = "poly_act", .name = "v2_fused_horner",
                                   .summary = "one kernel, Horner form in fp32 registers (3 fmaf), 16-byte vectors",
                                   .kind = klab::ImplKind::cuda, .run = run_v2_fused_horner}));
KLAB_REGISTER(klab::register_impl({.op = "poly_act", .name = "triton",
                                   .summary = "the Horner form in Triton, compiled ahead of time",
                                   .kind = klab::ImplKind::triton, .supports = triton_supports, .run = run_triton}));

}  // namespace lesson06
