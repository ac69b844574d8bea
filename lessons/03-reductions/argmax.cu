// Lesson 03 — max with its index (argmax), fp32.
//
// Semantics: value = max(x), index = the LOWEST i with x[i] == value (ties go to the
// first occurrence, as in NumPy, PyTorch and CUB). n = 0: value NaN, index -1. Inputs are
// finite (NaN ordering is not defined here). The generator draws integers in [-50, 50],
// so every array longer than a few hundred elements has its maximum many times over and
// the tie rule is what the test checks.
//
// Versions:
//   v1_two_pass         grid-stride (value, index) pairs, warp shuffles with the tie-aware
//                       comparison, per-block partials, a second 1-block launch
//   v2_vec_last_block   16-byte loads, 4 in flight, one launch: the last block reduces the
//                       partials (the sum v4 pattern)
//   cub                 cub::DeviceReduce::ArgMax
//   triton              reduce_triton.py, two stages; the chunk timed per shape (klab::autotune)
// Every version is deterministic: max and "lowest index" do not depend on the order.
//
// Run:  klab test 03 --op argmax     klab bench 03 --op argmax
#include <cub/device/device_reduce.cuh>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "klab/autotune.hpp"
#include "klab/device/warp.cuh"
#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "klab/triton.hpp"
#include "reductions.cuh"

#if KLAB_HAVE_TRITON
#include "reduce_triton.h"
#endif

namespace {

using klab::DType;
using klab::Problem;
using klab::TensorSpec;

constexpr int kNoIndex = std::numeric_limits<int>::max();  // index of the identity element

// ---------------------------------------------------------------------------------------
// CPU reference
// ---------------------------------------------------------------------------------------

klab::Reference argmax_ref(const Problem& p, const klab::Inputs& in) {
  const std::int64_t n = p.shape[0];
  if (n == 0) return {{std::nan("")}, {-1.0}};
  const float* x = in.tensors[0].as<float>();
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;  // strict: an equal value later does not replace it
  return {{static_cast<double>(x[best])}, {static_cast<double>(best)}};
}

// ---------------------------------------------------------------------------------------
// Op spec: shapes, validation, tolerances
// ---------------------------------------------------------------------------------------

klab::Op make_argmax_op() {
  klab::Op op;
  op.lesson = "03";
  op.name = "argmax";
  op.summary = "max(x) and the lowest index holding it (n = 0: NaN, -1)";
  op.dims = {"n"};
  op.dtypes = {DType::f32};
  // (1 << 24) + 3 caps v2's grid at the resident blocks, so its four-loads-per-trip loop
  // repeats (3-4 trips). 2^31 - 1 is the largest n the int32 index holds (8 GiB): loop
  // counters pass 2^31 - 1 on their last step, so they must be 64-bit.
  op.test_shapes = {{0}, {1}, {2}, {7}, {127}, {257}, {1023}, {4097}, {65537}, {1000003}, {(1 << 24) + 3},
                    {(std::int64_t{1} << 31) - 1}};
  op.no_huge_shape = "the index output is int32: n <= 2^31 - 1";
  op.bench_shapes = {{1 << 24}, {1 << 28}};
  op.baseline = "cub";
  op.tour = {"v1_two_pass", "v2_vec_last_block"};
  op.validate = [](const Problem& p) {
    if (auto why = lesson03::validate_1d(p); !why.empty()) return why;
    if (p.shape[0] > std::numeric_limits<int>::max()) return std::string("the index output is int32: n < 2^31");
    return std::string();
  };
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", p.dtype, p.shape}}; };
  op.outputs = [](const Problem&) {
    return std::vector<TensorSpec>{{"value", DType::f32, {1}}, {"index", DType::i32, {1}}};
  };
  // Integers in [-50, 50] stored as f32: plenty of ties for the lowest-index rule.
  op.generate = [](const Problem&, std::uint64_t seed, klab::Inputs& in) {
    klab::fill_int(in.tensors[0], klab::derive_seed(seed, 0), -50, 50);
  };
  op.reference = argmax_ref;
  op.tolerance = [](const Problem&, int) { return klab::Tolerance{0, 0}; };  // exact: no arithmetic
  // bytes (the default): x read once, the value and its index written (4n + 8).
  op.bound = klab::Bound::memory_read;
  return op;
}

// ---------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------

constexpr int kThreads = 256;
static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block_argmax: whole warps, at most 32 of them");

// (av, ai) beats (bv, bi): larger value, or the same value at a lower index.
__device__ __forceinline__ bool better(float av, int ai, float bv, int bi) {
  return av > bv || (av == bv && ai < bi);
}

__device__ __forceinline__ void warp_argmax(float& v, int& i) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float ov = __shfl_down_sync(klab::kFullMask, v, offset);
    const int oi = __shfl_down_sync(klab::kFullMask, i, offset);
    if (better(ov, oi, v, i)) v = ov, i = oi;
  }
}

// Result valid in thread 0.
__device__ __forceinline__ void block_argmax(float& v, int& i) {
  __shared__ float s_v[32];
  __shared__ int s_i[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_argmax(v, i);
  if (lane == 0) s_v[warp] = v, s_i[warp] = i;
  __syncthreads();
  const bool has = threadIdx.x < (blockDim.x >> 5);
  v = has ? s_v[threadIdx.x] : -INFINITY;
  i = has ? s_i[threadIdx.x] : kNoIndex;
  if (warp == 0) warp_argmax(v, i);
  __syncthreads();
}

// v1_two_pass, pass 1 (g_idx == nullptr: the index is the position) and pass 2 (over partials).
__global__ void argmax_v1_two_pass(const float* __restrict__ g_val, const int* __restrict__ g_idx, std::int64_t n,
                                   float* __restrict__ g_out_val, int* __restrict__ g_out_idx) {
  float r_v = -INFINITY;
  int r_i = kNoIndex;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += step) {
    const float v = g_val[k];
    const int i = g_idx ? g_idx[k] : static_cast<int>(k);
    if (better(v, i, r_v, r_i)) r_v = v, r_i = i;
  }
  block_argmax(r_v, r_i);
  if (threadIdx.x == 0) g_out_val[blockIdx.x] = r_v, g_out_idx[blockIdx.x] = r_i;
}

__device__ unsigned int g_argmax_ticket;  // wraps to 0 at the end of each launch (see sum.cu)

__device__ __forceinline__ void take_if_greater(float v, std::int64_t k, float& r_v, int& r_i) {
  if (v > r_v) r_v = v, r_i = static_cast<int>(k);  // this thread's indices only grow: strict
}

// v2_vec_last_block: sum's v4 pattern (16-byte loads, 4 in flight, last block reduces).
__global__ void __launch_bounds__(kThreads)
    argmax_v2_vec_last_block(const float* __restrict__ g_x, std::int64_t n, bool aligned, float* __restrict__ g_pv,
                             int* __restrict__ g_pi, float* __restrict__ g_val, int* __restrict__ g_idx) {
  float r_v = -INFINITY;
  int r_i = kNoIndex;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t nvec = aligned ? n / 4 : 0;
  const float4* g_x4 = reinterpret_cast<const float4*>(g_x);
  std::int64_t v = tid;
  for (; v + 3 * step < nvec; v += 4 * step) {
    float4 r_q[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) r_q[u] = g_x4[v + u * step];  // 4 loads in flight first
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const std::int64_t k = 4 * (v + u * step);
      take_if_greater(r_q[u].x, k, r_v, r_i);
      take_if_greater(r_q[u].y, k + 1, r_v, r_i);
      take_if_greater(r_q[u].z, k + 2, r_v, r_i);
      take_if_greater(r_q[u].w, k + 3, r_v, r_i);
    }
  }
  for (; v < nvec; v += step) {
    const float4 q = g_x4[v];
    take_if_greater(q.x, 4 * v, r_v, r_i);
    take_if_greater(q.y, 4 * v + 1, r_v, r_i);
    take_if_greater(q.z, 4 * v + 2, r_v, r_i);
    take_if_greater(q.w, 4 * v + 3, r_v, r_i);
  }
  for (std::int64_t k = nvec * 4 + tid; k < n; k += step) take_if_greater(g_x[k], k, r_v, r_i);
  block_argmax(r_v, r_i);

  __shared__ bool s_last;
  if (threadIdx.x == 0) {
    g_pv[blockIdx.x] = r_v;
    g_pi[blockIdx.x] = r_i;
    __threadfence();
    s_last = atomicInc(&g_argmax_ticket, gridDim.x - 1) == gridDim.x - 1;
  }
  __syncthreads();
  if (!s_last) return;
  r_v = -INFINITY;
  r_i = kNoIndex;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
    const float pv = __ldcg(&g_pv[b]);
    const int pi = __ldcg(&g_pi[b]);
    if (better(pv, pi, r_v, r_i)) r_v = pv, r_i = pi;
  }
  block_argmax(r_v, r_i);
  if (threadIdx.x == 0) g_val[0] = r_v, g_idx[0] = r_i;
}

// ---------------------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------------------

std::size_t align16(std::size_t b) { return (b + 15) / 16 * 16; }

// n = 0: value NaN, index -1 — 0xFF bytes are exactly that in both.
void write_empty(const klab::Launch& l) {
  KLAB_CHECK_CUDA(cudaMemsetAsync(l.out[0].data, 0xFF, 4, l.stream));
  KLAB_CHECK_CUDA(cudaMemsetAsync(l.out[1].data, 0xFF, 4, l.stream));
}

constexpr int kMaxPartials = 1024;
int v1_grid(std::int64_t n) { return lesson03::grid_for(n, kThreads * 8, kMaxPartials); }

std::size_t partials_bytes(std::int64_t g) { return 2 * align16(static_cast<std::size_t>(g) * 4); }

void run_v1_two_pass(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return write_empty(l);
  const int g = v1_grid(n);
  float* val = l.out[0].as<float>();
  int* idx = l.out[1].as<int>();
  if (g == 1) {
    argmax_v1_two_pass<<<1, kThreads, 0, l.stream>>>(l.in[0].as<float>(), nullptr, n, val, idx);
  } else {
    auto* pv = static_cast<float*>(l.workspace);
    auto* pi = reinterpret_cast<int*>(static_cast<char*>(l.workspace) + align16(g * 4));
    argmax_v1_two_pass<<<g, kThreads, 0, l.stream>>>(l.in[0].as<float>(), nullptr, n, pv, pi);
    KLAB_CHECK_LAUNCH();
    argmax_v1_two_pass<<<1, kThreads, 0, l.stream>>>(pv, pi, g, val, idx);
  }
  KLAB_CHECK_LAUNCH();
}

int v2_grid(std::int64_t n) {
  static const int cap = lesson03::resident_blocks(argmax_v2_vec_last_block, kThreads);
  return lesson03::grid_for(n, kThreads * 16, cap);
}

void run_v2_vec_last_block(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return write_empty(l);
  const int g = v2_grid(n);
  auto* pv = static_cast<float*>(l.workspace);
  auto* pi = reinterpret_cast<int*>(static_cast<char*>(l.workspace) + align16(g * 4));
  const bool aligned = reinterpret_cast<std::uintptr_t>(l.in[0].data) % 16 == 0;
  argmax_v2_vec_last_block<<<g, kThreads, 0, l.stream>>>(l.in[0].as<float>(), n, aligned, pv, pi,
                                                         l.out[0].as<float>(), l.out[1].as<int>());
  KLAB_CHECK_LAUNCH();
}

std::size_t cub_argmax_bytes(const Problem& p) {
  std::size_t bytes = 0;
  KLAB_CHECK_CUDA(cub::DeviceReduce::ArgMax(nullptr, bytes, static_cast<const float*>(nullptr),
                                            static_cast<float*>(nullptr), static_cast<int*>(nullptr),
                                            p.shape[0]));
  return bytes;
}

void run_cub(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return write_empty(l);  // CUB's empty answer is (lowest float, 1): ours is (NaN, -1)
  std::size_t bytes = l.workspace_bytes;
  KLAB_CHECK_CUDA(cub::DeviceReduce::ArgMax(l.workspace, bytes, l.in[0].as<float>(), l.out[0].as<float>(),
                                            l.out[1].as<int>(), n, l.stream));
}

// Triton: stage 1 writes one (max, index) partial per chunk (the chunk per candidate,
// kTritonStage1), stage 2 combines them; the fastest candidate per shape.
std::size_t triton_argmax_workspace(const Problem& p) {
  return partials_bytes(klab::ceil_div<std::int64_t>(p.shape[0], lesson03::kTritonMinChunk));
}

void run_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return write_empty(l);
  klab::triton_prepare();
  KLAB_REQUIRE(tr_argmax_stage1_f32_get_num_algos() == lesson03::kTritonStage1Count,
               "triton argmax: the linked stage 1 does not match kTritonStage1 (reduce_triton.py's STAGE1_CONFIGS)");
  const auto s = reinterpret_cast<CUstream>(l.stream);
  auto launch = [&](int c) {
    const std::int64_t parts = klab::ceil_div<std::int64_t>(n, lesson03::kTritonStage1[c].chunk);
    const auto pv = reinterpret_cast<CUdeviceptr>(l.workspace);
    const auto pi = pv + align16(static_cast<std::size_t>(parts) * 4);  // 16-byte aligned: the launcher checks
    KLAB_CHECK_CU(tr_argmax_stage1_f32(s, reinterpret_cast<CUdeviceptr>(l.in[0].data), pv, pi, n, c));
    KLAB_CHECK_CU(tr_argmax_stage2_f32_default(s, pv, pi, reinterpret_cast<CUdeviceptr>(l.out[0].data),
                                               reinterpret_cast<CUdeviceptr>(l.out[1].data), parts));
  };
  launch(klab::autotune(l, "argmax|triton|" + l.problem.label(), lesson03::triton_stage1_candidates(l.problem), 0, launch));
#else
  (void)l;
  KLAB_REQUIRE(false, "built without Triton");
#endif
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------

KLAB_REGISTER(klab::register_op(make_argmax_op()));
KLAB_REGISTER(klab::register_impl({.op = "argmax", .name = "v1_two_pass",
                                   .summary = "grid-stride pairs, tie-aware warp shuffles, 2 launches",
                                   .kind = klab::ImplKind::cuda,
                                   .workspace = [](const Problem& p) { return partials_bytes(v1_grid(p.shape[0])); },
                                   .run = run_v1_two_pass}));
KLAB_REGISTER(klab::register_impl({.op = "argmax", .name = "v2_vec_last_block",
                                   .summary = "16-byte loads x4 in flight, last block reduces: 1 launch",
                                   .kind = klab::ImplKind::cuda,
                                   .workspace = [](const Problem& p) { return partials_bytes(v2_grid(p.shape[0])); },
                                   .run = run_v2_vec_last_block}));
KLAB_REGISTER(klab::register_impl({.op = "argmax", .name = "cub",
                                   .summary = "cub::DeviceReduce::ArgMax",
                                   .kind = klab::ImplKind::vendor, .workspace = cub_argmax_bytes,
                                   .run = run_cub}));
KLAB_REGISTER(klab::register_impl({.op = "argmax", .name = "triton",
                                   .summary = "Triton: chunk partials, then one program; the chunk chosen per shape",
                                   .kind = klab::ImplKind::triton,
                                   .supports = [](const Problem&) { return klab::triton_supported(); },
                                   .workspace = triton_argmax_workspace, .run = run_triton,
                                   .candidates = lesson03::triton_stage1_candidates}));
