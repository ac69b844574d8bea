// Lesson 16 — the data-parallel training step, built from the lessons' kernels.
//
//   v1_allreduce_after_backward   every rank runs the forward and the backward over its share
//                                 of the batch; then one all-reduce of the whole gradient
//                                 (NCCL, on the ranks' own streams); then AdamW
//   v2_bucket_overlap             the gradient in two buckets a block (its W2, then the rest):
//                                 as soon as the backward has written a bucket, the rank's
//                                 communication stream all-reduces it while its compute
//                                 stream goes on; AdamW waits for the last bucket
//   v3_copy_engine_ring           v2's buckets, each all-reduced by the lesson's ring (ring.cu:
//                                 the schedule of v1_ring_memcpy, in place) with the copy engines
//                                 moving the data and a vector add summing it: NCCL's kernels
//                                 need SMs, and the step's persistent matmuls hold every SM
//                                 while they run; a copy engine is not an SM (it hid more of
//                                 the all-reduce: README)
//
// Every kernel of the step is an impl another lesson registered and checked, found in the
// registry by name and launched through its own run() with views of this step's buffers:
//   forward, block b:   layernorm v2_block_registers (08)         h, mean, rstd = LN(x)
//                       linear_bias_act v2_fused_epilogue (06)    z = h · W1ᵀ + b1 (variant bias)
//                       gelu v3_vec16 (01)                        a = gelu(z)
//                       matmul v19_tma_store (05)                 y = a · W2ᵀ (nt)
//                       vector_add v3_vec16 (01)                  x ← x + y
//   backward, block b:  matmul v19_tma_store (tn)                 dW2 = gᵀ · a
//                       linear_dgelu_bgrad v2_fused_epilogue (06) dz = (g · W2) ⊙ gelu'(z), db1
//                       matmul v19_tma_store (tn)                 dW1 = dzᵀ · h
//                       matmul v19_tma_store (nn)                 dh = dz · W1
//                       layernorm_backward v2_fused_partials (08) dx, dgamma, dbeta
//                       vector_add v3_vec16                       g ← g + dx
//   update:             adamw v2_multi_tensor (11), bf16_copy     params, m, v, and p16
// dW1 and dW2 leave the matmul in bf16 and are widened into the fp32 gradient (widen_bf16,
// below): the sums over ranks and the optimizer run in fp32.
//
// Each rank's step is enqueued by a host thread of its own (klab::Ranks::each: one thread a
// GPU, each with its GPU current; a step is ~190 launches a GPU, which one thread for eight
// GPUs would have to issue in turn). Rank r computes on its rank stream and, in v2 and v3,
// communicates on a second stream of its GPU: an event recorded after a bucket's last kernel
// is what the communication stream waits for before it all-reduces the bucket, and the
// compute stream waits for an event after the last bucket before AdamW. NCCL takes one call a
// rank from each rank's thread, in the same order on every rank; v3's ring orders its ranks
// itself (ring_all_reduce_ce). What the threads share (buffers, streams, events) is made
// before they start. The harness's events bracket both streams of every rank (the ranks fork
// from and join into the launch stream).
//
// The buffers: rank 0's inputs and outputs are the harness's own tensors; every other rank has
// replicas on its GPU, which stage() fills before each launch (its rows of x and gy, the
// parameters, moments and the poisoned gradient) and gather() checks after it: every rank must
// end with rank 0's parameters, moments and gradient bit for bit, or the launch is an error.
//
//   klab test 16 --op dp_step
//   klab bench 16 --op dp_step
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "allreduce.cuh"
#include "dp_model.hpp"
#include "dp_step.cuh"
#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/ranks.hpp"
#include "nccl.cuh"

namespace lesson16 {
namespace {

using std::int64_t;
using klab::DType;
using klab::Dims;
using bf16 = __nv_bfloat16;

// ======================================================================================
// Kernels
// ======================================================================================
// out[i] = in[i], bf16 to fp32; both 16-byte aligned and n a multiple of 8 (every weight
// matrix's size is: C is).
__global__ void widen_bf16(float* __restrict__ out, const bf16* __restrict__ in, int64_t n) {
  using V = klab::Vec<bf16, 8>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n / 8; i += stride) {
    const V v = reinterpret_cast<const V*>(in)[i];
    float4 lo, hi;
    lo.x = __bfloat162float(v.v[0]), lo.y = __bfloat162float(v.v[1]), lo.z = __bfloat162float(v.v[2]), lo.w = __bfloat162float(v.v[3]);
    hi.x = __bfloat162float(v.v[4]), hi.y = __bfloat162float(v.v[5]), hi.z = __bfloat162float(v.v[6]), hi.w = __bfloat162float(v.v[7]);
    reinterpret_cast<float4*>(out)[2 * i] = lo;
    reinterpret_cast<float4*>(out)[2 * i + 1] = hi;
  }
}

// Adds to *differ the number of 32-bit words in which a and b differ (gather's replica check).
__global__ void count_differences(const std::uint32_t* __restrict__ a, const std::uint32_t* __restrict__ b, int64_t n,
                                  unsigned long long* differ) {
  unsigned long long c = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) c += a[i] != b[i];
  if (c) atomicAdd(differ, c);
}

// ======================================================================================
// The lessons' impls the step launches
// ======================================================================================
struct Part {
  const char *op, *impl, *lesson;
};
constexpr Part kLayernorm{"layernorm", "v2_block_registers", "08"};
constexpr Part kLayernormBwd{"layernorm_backward", "v2_fused_partials", "08"};
constexpr Part kLinear{"linear_bias_act", "v2_fused_epilogue", "06"};
constexpr Part kDgelu{"linear_dgelu_bgrad", "v2_fused_epilogue", "06"};
constexpr Part kGelu{"gelu", "v3_vec16", "01"};
constexpr Part kAdd{"vector_add", "v3_vec16", "01"};
constexpr Part kMatmul{"matmul", "v19_tma_store", "05"};
constexpr Part kAdamw{"adamw", "v2_multi_tensor", "11"};

const klab::Impl* find(const Part& p) { return klab::registry().find_impl(p.op, p.impl); }

// The sub-problems of one rank's step over T tokens.
struct Problems {
  klab::Problem ln, linear, gelu, fwd_mm, add, dw2, dgelu, dw1, dh, ln_bwd, adamw;
};
Problems problems(const DpShape& s, int64_t T) {
  const int64_t C = s.C, H = s.H();
  const DType b = DType::bf16;
  return {{{T, C}, b, ""},          {{T, H, C}, b, "bias"}, {{T * H}, b, ""},     {{T, C, H}, b, "nt"},
          {{T * C}, b, ""},         {{C, H, T}, b, "tn"},   {{T, H, C}, b, ""},   {{H, C, T}, b, "tn"},
          {{T, C, H}, b, "nn"},     {{T, C}, b, ""},        {{param_count(s), 1, 1}, DType::f32, "bf16_copy"}};
}

std::string parts_missing_or_unsupported(const DpShape& s) {
  const Problems p = problems(s, s.tokens);
  const std::pair<Part, const klab::Problem*> uses[] = {
      {kLayernorm, &p.ln}, {kLinear, &p.linear}, {kGelu, &p.gelu},   {kMatmul, &p.fwd_mm}, {kAdd, &p.add},
      {kMatmul, &p.dw2},   {kDgelu, &p.dgelu},   {kMatmul, &p.dw1},  {kMatmul, &p.dh},     {kLayernormBwd, &p.ln_bwd},
      {kAdamw, &p.adamw}};
  for (const auto& [part, prob] : uses) {
    const klab::Impl* im = find(part);
    if (!im) return std::string("needs lesson ") + part.lesson + "'s " + part.op + " " + part.impl + " in this build";
    if (im->supports)
      if (std::string why = im->supports(*prob); !why.empty()) return std::string(part.op) + " " + part.impl + ": " + why;
  }
  return "";
}

std::size_t workspace_of(const DpShape& s) {
  const Problems p = problems(s, s.tokens);
  std::size_t most = 0;
  for (const auto& [part, prob] : {std::pair{kLayernormBwd, &p.ln_bwd}, {kDgelu, &p.dgelu}, {kLinear, &p.linear},
                                   {kMatmul, &p.dw1}, {kAdamw, &p.adamw}})
    if (const klab::Impl* im = find(part); im && im->workspace) most = std::max(most, im->workspace(*prob));
  return most;
}

klab::TensorView view(const void* p, DType t, Dims shape) {
  return {const_cast<void*>(p), t, shape, klab::contiguous_strides(shape)};
}

// ======================================================================================
// One rank's buffers
// ======================================================================================
// The replicas of a rank other than 0 (stage fills them), and every rank's activations.
klab::RankBuffers& replica_buffers() {
  static klab::RankBuffers b;
  return b;
}
klab::RankBuffers& activation_buffers() {
  static klab::RankBuffers b;
  return b;
}

struct RankData {
  const bf16 *x, *gy;                // {T, C}: this rank's rows
  float *params, *m, *v, *grad;      // {P}
  bf16* p16;                         // {P}
  // Activations: xs[b] is block b's input (xs[0] = x), h[b], z[b], a[b]; mean, rstd per block.
  std::vector<bf16*> xs, h, z, a;
  std::vector<float*> mean, rstd;
  bf16 *y, *g[2], *dz, *dh, *dx, *dw;   // temporaries
  void* workspace;
  std::size_t workspace_bytes;
};

// Carves `bytes` from a running offset, 256-byte aligned.
struct Carver {
  char* base;
  std::size_t used = 0;
  template <class T>
  T* take(int64_t n) {
    T* p = reinterpret_cast<T*>(base ? base + used : nullptr);
    used += (static_cast<std::size_t>(n) * sizeof(T) + 255) / 256 * 256;
    return p;
  }
};

void carve_activations(const DpShape& s, Carver& c, RankData& d) {
  const int64_t T = s.tokens, C = s.C, H = s.H(), B = s.blocks;
  d.xs.assign(B + 1, nullptr), d.h.assign(B, nullptr), d.z.assign(B, nullptr), d.a.assign(B, nullptr);
  d.mean.assign(B, nullptr), d.rstd.assign(B, nullptr);
  d.xs[0] = const_cast<bf16*>(d.x);
  for (int64_t b = 0; b < B; ++b) {
    d.xs[b + 1] = c.take<bf16>(T * C), d.h[b] = c.take<bf16>(T * C);
    d.z[b] = c.take<bf16>(T * H), d.a[b] = c.take<bf16>(T * H);
    d.mean[b] = c.take<float>(T), d.rstd[b] = c.take<float>(T);
  }
  d.y = c.take<bf16>(T * C), d.g[0] = c.take<bf16>(T * C), d.g[1] = c.take<bf16>(T * C);
  d.dz = c.take<bf16>(T * H), d.dh = c.take<bf16>(T * C), d.dx = c.take<bf16>(T * C), d.dw = c.take<bf16>(H * C);
  d.workspace_bytes = workspace_of(s);
  d.workspace = c.take<char>(static_cast<int64_t>(d.workspace_bytes));
}

std::size_t replica_bytes(const DpShape& s) {
  Carver c{nullptr};
  const int64_t P = param_count(s), TC = s.tokens * s.C;
  c.take<bf16>(TC), c.take<bf16>(TC), c.take<float>(P), c.take<float>(P), c.take<float>(P), c.take<float>(P), c.take<bf16>(P);
  return c.used;
}

// Rank r's data: from the launch's tensors (rank 0 and its x, gy rows) or its replicas.
RankData rank_data(const DpShape& s, const klab::Launch& l, int r) {
  RankData d{};
  const int64_t P = param_count(s), TC = s.tokens * s.C;
  if (r == 0) {
    d.x = l.in[0].as<const bf16>(), d.gy = l.in[1].as<const bf16>();
    d.params = l.in[2].as<float>(), d.m = l.in[3].as<float>(), d.v = l.in[4].as<float>(), d.p16 = l.in[5].as<bf16>();
    d.grad = l.out[0].as<float>();
  } else {
    Carver c{static_cast<char*>(replica_buffers().get(r, replica_bytes(s)))};
    d.x = c.take<bf16>(TC), d.gy = c.take<bf16>(TC);
    d.params = c.take<float>(P), d.m = c.take<float>(P), d.v = c.take<float>(P), d.grad = c.take<float>(P);
    d.p16 = c.take<bf16>(P);
  }
  Carver size{nullptr};
  carve_activations(s, size, d);
  Carver c{static_cast<char*>(activation_buffers().get(r, size.used))};
  carve_activations(s, c, d);
  return d;
}

// ======================================================================================
// The step
// ======================================================================================
// Enqueues one impl of another lesson on stream st (rank r's GPU current).
void launch(const Part& part, const klab::Problem& prob, std::vector<klab::TensorView> in,
            std::vector<klab::TensorView> out, const std::vector<double>& scalars, const RankData& d, cudaStream_t st) {
  const klab::Impl* im = find(part);
  KLAB_REQUIRE(im != nullptr, std::string("dp_step: ") + part.op + " " + part.impl + " is not in this build");
  const std::size_t ws = im->workspace ? im->workspace(prob) : 0;
  KLAB_REQUIRE(ws <= d.workspace_bytes, "dp_step: the workspace is smaller than " + std::string(part.impl) + " asks");
  if (im->zero_workspace && ws) KLAB_CHECK_CUDA(cudaMemsetAsync(d.workspace, 0, ws, st));
  im->run(klab::Launch{.problem = prob, .in = std::move(in), .out = std::move(out), .scalars = scalars, .stream = st,
                       .workspace = ws ? d.workspace : nullptr, .workspace_bytes = ws});
}

const std::vector<double> kNoScalars;

void forward_block(const DpShape& s, const Problems& p, const RankData& d, int64_t b, cudaStream_t st) {
  const int64_t T = s.tokens, C = s.C, H = s.H();
  const BlockLayout L = block_layout(C);
  const bf16* w = d.p16 + b * L.size;
  launch(kLayernorm, p.ln, {view(d.xs[b], DType::bf16, {T, C}), view(w + L.gamma, DType::bf16, {C}), view(w + L.beta, DType::bf16, {C})},
         {view(d.h[b], DType::bf16, {T, C}), view(d.mean[b], DType::f32, {T}), view(d.rstd[b], DType::f32, {T})}, kNoScalars, d, st);
  launch(kLinear, p.linear, {view(d.h[b], DType::bf16, {T, C}), view(w + L.w1, DType::bf16, {H, C}), view(w + L.b1, DType::bf16, {H})},
         {view(d.z[b], DType::bf16, {T, H})}, kNoScalars, d, st);
  launch(kGelu, p.gelu, {view(d.z[b], DType::bf16, {T * H})}, {view(d.a[b], DType::bf16, {T * H})}, kNoScalars, d, st);
  launch(kMatmul, p.fwd_mm, {view(d.a[b], DType::bf16, {T, H}), view(w + L.w2, DType::bf16, {C, H})},
         {view(d.y, DType::bf16, {T, C})}, kNoScalars, d, st);
  launch(kAdd, p.add, {view(d.xs[b], DType::bf16, {T * C}), view(d.y, DType::bf16, {T * C})},
         {view(d.xs[b + 1], DType::bf16, {T * C})}, kNoScalars, d, st);
}

void widen(float* out, const bf16* in, int64_t n, cudaStream_t st) {
  if (n == 0) return;
  widen_bf16<<<klab::grid_stride_blocks(n / 8, 256), 256, 0, st>>>(out, in, n);
  KLAB_CHECK_LAUNCH();
}

// The gradient at block b's output: gy at the last block, else what block b + 1 left in d.g.
const bf16* grad_out(const DpShape& s, const RankData& d, int64_t b) { return b == s.blocks - 1 ? d.gy : d.g[b % 2]; }

// Block b's W2 gradient first (v2 all-reduces it while the rest of the block runs).
void backward_block_w2(const DpShape& s, const Problems& p, const RankData& d, int64_t b, cudaStream_t st) {
  const int64_t T = s.tokens, C = s.C, H = s.H();
  const BlockLayout L = block_layout(C);
  launch(kMatmul, p.dw2, {view(grad_out(s, d, b), DType::bf16, {T, C}), view(d.a[b], DType::bf16, {T, H})},
         {view(d.dw, DType::bf16, {C, H})}, kNoScalars, d, st);
  widen(d.grad + b * L.size + L.w2, d.dw, C * H, st);
}

void backward_block_rest(const DpShape& s, const Problems& p, const RankData& d, int64_t b, cudaStream_t st) {
  const int64_t T = s.tokens, C = s.C, H = s.H();
  const BlockLayout L = block_layout(C);
  const bf16* w = d.p16 + b * L.size;
  float* G = d.grad + b * L.size;
  const bf16* g = grad_out(s, d, b);
  launch(kDgelu, p.dgelu, {view(g, DType::bf16, {T, C}), view(w + L.w2, DType::bf16, {C, H}), view(d.z[b], DType::bf16, {T, H})},
         {view(d.dz, DType::bf16, {T, H}), view(G + L.b1, DType::f32, {H})}, kNoScalars, d, st);
  launch(kMatmul, p.dw1, {view(d.dz, DType::bf16, {T, H}), view(d.h[b], DType::bf16, {T, C})},
         {view(d.dw, DType::bf16, {H, C})}, kNoScalars, d, st);
  widen(G + L.w1, d.dw, H * C, st);
  launch(kMatmul, p.dh, {view(d.dz, DType::bf16, {T, H}), view(w + L.w1, DType::bf16, {H, C})},
         {view(d.dh, DType::bf16, {T, C})}, kNoScalars, d, st);
  launch(kLayernormBwd, p.ln_bwd,
         {view(d.xs[b], DType::bf16, {T, C}), view(w + L.gamma, DType::bf16, {C}), view(d.dh, DType::bf16, {T, C}),
          view(d.mean[b], DType::f32, {T}), view(d.rstd[b], DType::f32, {T})},
         {view(d.dx, DType::bf16, {T, C}), view(G + L.gamma, DType::f32, {C}), view(G + L.beta, DType::f32, {C})}, kNoScalars, d, st);
  if (b > 0)
    launch(kAdd, p.add, {view(d.dx, DType::bf16, {T * C}), view(g, DType::bf16, {T * C})},
           {view(d.g[(b - 1) % 2], DType::bf16, {T * C})}, kNoScalars, d, st);
}

// Block b's backward, both parts: g (the gradient at its output) in, the gradient at its
// input in the other half of d.g out (not at block 0: nothing needs it), block b's gradients
// written.
void backward_block(const DpShape& s, const Problems& p, const RankData& d, int64_t b, cudaStream_t st) {
  backward_block_w2(s, p, d, b, st);
  backward_block_rest(s, p, d, b, st);
}

void adamw(const DpShape& s, const Problems& p, const RankData& d, const std::vector<double>& scalars, cudaStream_t st) {
  const int64_t P = param_count(s);
  launch(kAdamw, p.adamw,
         {view(d.params, DType::f32, {P}), view(d.grad, DType::f32, {1, P}), view(d.m, DType::f32, {P}), view(d.v, DType::f32, {P})},
         {view(d.p16, DType::bf16, {P})}, scalars, d, st);
}

// Rank r's communication stream and events, and (v3) how far its ring has got, made by the
// calling thread before the ranks' threads start (Ranks::each: nothing they share may be made
// on first use).
struct CommLane {
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> bucket;   // [2b]: block b's W2 gradient is written, [2b + 1]: the rest
  cudaEvent_t done = nullptr;        // every bucket is reduced
  // v3: an event for each of its ring's steps in a launch, bucket by bucket (the first of a
  // bucket: its gradient is written), recorded once a launch each; `published` counts those
  // this rank's thread has recorded, for its right neighbour's thread to wait for.
  std::vector<cudaEvent_t> ring;
  std::atomic<int64_t> published{0};
};
CommLane& comm_lane(int r, int64_t blocks, int ranks) {
  static std::vector<std::unique_ptr<CommLane>> lanes;
  if (lanes.size() <= static_cast<std::size_t>(r)) lanes.resize(r + 1);
  if (!lanes[r]) lanes[r] = std::make_unique<CommLane>();
  CommLane& c = *lanes[r];
  klab::DeviceScope scope(klab::rank_device(r));
  if (!c.stream) {
    KLAB_CHECK_CUDA(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    KLAB_CHECK_CUDA(cudaEventCreateWithFlags(&c.done, cudaEventDisableTiming));
  }
  auto grow = [](std::vector<cudaEvent_t>& v, int64_t n) {
    while (static_cast<int64_t>(v.size()) < n) {
      cudaEvent_t e;
      KLAB_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      v.push_back(e);
    }
  };
  grow(c.bucket, 2 * blocks);
  grow(c.ring, 2 * blocks * (ring_steps(ranks) + 1));
  return c;
}

klab::RankBuffers& staging_buffers() {
  static klab::RankBuffers b;
  return b;
}

// What rank r's thread needs of the whole job.
struct Job {
  DpShape s;
  Problems p;
  std::vector<RankData> d;
  std::vector<CommLane*> lane;
  std::vector<float*> staged;        // v3: each rank's staging buffer
  klab::Ranks* ranks;
  cudaStream_t launch;
  const std::vector<double>* scalars;
};

// Sums n floats at offset `at` of the ranks' gradients in place: rank r's part of the NCCL
// call, on stream st. Each rank's thread calls it for its own communicator, in the same order.
void nccl_all_reduce(const Job& j, int r, int64_t at, int64_t n, cudaStream_t st) {
#if KLAB_HAVE_NCCL
  float* g = j.d[r].grad + at;
  KLAB_CHECK_NCCL(ncclAllReduce(g, g, static_cast<size_t>(n), ncclFloat32, ncclSum,
                                nccl_comms(j.s.ranks)[static_cast<std::size_t>(r)], st));
#else
  (void)j, (void)r, (void)at, (void)n, (void)st;
  throw klab::Error("dp_step: more than one rank needs NCCL, and this build has none");
#endif
}

// v3: rank r's part of summing bucket `bucket` (n floats at offset `at`) of every rank's
// gradient in place, by the ring of allreduce.cuh (ring_step, segment) on the ranks'
// communication streams: a reduce step copies rank r−1's partial of a segment into a staging
// buffer by the copy engine and adds it to rank r's own part (lesson 01's vector_add); a
// gather step copies the finished segment. Step k of rank r waits for step k−1 of rank r−1
// (step 0 for r−1's bucket being written), as klab::Ranks::ring_step orders the rings of
// ring.cu: on the GPU by r−1's event for that step, and on the host first for r−1's thread to
// have recorded it (a wait binds to an event's latest record when it is enqueued). In place is
// safe under that order too: rank r overwrites its original of a segment only after rank r+1
// has read it (its step 0 reads segment r, which rank r rewrites at step R−1, R−1 waits later
// around the ring).
void ring_all_reduce_ce(const Job& j, int r, int64_t bucket, int64_t at, int64_t n) {
  const int R = j.s.ranks, left = (r + R - 1) % R;
  CommLane &c = *j.lane[r], &lc = *j.lane[left];
  const int64_t first = bucket * (ring_steps(R) + 1);   // this bucket's events: first, first + 1, ...
  auto publish = [&](int64_t e) {
    KLAB_CHECK_CUDA(cudaEventRecord(c.ring[e], c.stream));
    c.published.store(e + 1, std::memory_order_release);
  };
  publish(first);   // the comm stream already waits for the bucket's gradient
  for (int k = 0; k < ring_steps(R); ++k) {
    while (lc.published.load(std::memory_order_acquire) <= first + k) {
      if (j.ranks->stopping()) throw klab::Error("dp_step: another rank failed");
      std::this_thread::yield();
    }
    KLAB_CHECK_CUDA(cudaStreamWaitEvent(c.stream, lc.ring[first + k], 0));
    const RingStep st = ring_step(r, k, R);
    const Segment g = segment(n, R, st.segment);
    float* mine = j.d[r].grad + at + g.begin;
    const float* theirs = j.d[left].grad + at + g.begin;
    if (g.count > 0) {
      const std::size_t bytes = static_cast<std::size_t>(g.count) * sizeof(float);
      if (st.reduce) {
        float* staged = j.staged[r];
        KLAB_CHECK_CUDA(cudaMemcpyPeerAsync(staged, klab::rank_device(r), theirs, klab::rank_device(left), bytes, c.stream));
        const klab::Problem add{{g.count}, DType::f32, ""};
        launch(kAdd, add, {view(mine, DType::f32, {g.count}), view(staged, DType::f32, {g.count})},
               {view(mine, DType::f32, {g.count})}, kNoScalars, j.d[r], c.stream);
      } else {
        KLAB_CHECK_CUDA(cudaMemcpyPeerAsync(mine, klab::rank_device(r), theirs, klab::rank_device(left), bytes, c.stream));
      }
    }
    publish(first + k + 1);
  }
}

enum class Comm { after_backward, nccl_buckets, ring_buckets };

// Rank r's whole step, on its own host thread (its GPU current).
void rank_step(const Job& j, int r, Comm how) {
  const DpShape& s = j.s;
  const RankData& d = j.d[r];
  const cudaStream_t st = j.ranks->stream(r, j.launch);
  CommLane& c = *j.lane[r];
  const bool buckets = how != Comm::after_backward && s.ranks > 1;
  for (int64_t b = 0; b < s.blocks; ++b) forward_block(s, j.p, d, b, st);
  // The buckets: block b's W2 as soon as its gradient is widened, then the rest of the block
  // (gamma, beta, b1, W1) when its backward ends: the last bucket, the one no compute hides,
  // is half a block.
  const BlockLayout L = block_layout(s.C);
  auto reduce_bucket = [&](int64_t b, int half, int64_t at, int64_t n) {
    KLAB_CHECK_CUDA(cudaEventRecord(c.bucket[2 * b + half], st));
    KLAB_CHECK_CUDA(cudaStreamWaitEvent(c.stream, c.bucket[2 * b + half], 0));
    if (how == Comm::ring_buckets) ring_all_reduce_ce(j, r, 2 * (s.blocks - 1 - b) + half, b * L.size + at, n);
    else nccl_all_reduce(j, r, b * L.size + at, n, c.stream);
  };
  for (int64_t b = s.blocks - 1; b >= 0; --b) {
    backward_block_w2(s, j.p, d, b, st);
    if (buckets) reduce_bucket(b, 0, L.w2, L.size - L.w2);
    backward_block_rest(s, j.p, d, b, st);
    if (buckets) reduce_bucket(b, 1, 0, L.w2);
  }
  if (buckets) {
    KLAB_CHECK_CUDA(cudaEventRecord(c.done, c.stream));
    KLAB_CHECK_CUDA(cudaStreamWaitEvent(st, c.done, 0));
  } else if (s.ranks > 1) {
    nccl_all_reduce(j, r, 0, param_count(s), st);
  }
  adamw(s, j.p, d, *j.scalars, st);
}

void run_step(const klab::Launch& l, Comm how) {
  Job j{dp_shape(l.problem), problems(dp_shape(l.problem), l.problem.shape.at(2)), {}, {}, {}, nullptr, l.stream, &l.scalars};
  const int R = j.s.ranks;
  j.ranks = &klab::Ranks::of(R);
  // Everything the ranks' threads share, made here first.
  const BlockLayout L = block_layout(j.s.C);
  for (int r = 0; r < R; ++r) {
    j.d.push_back(rank_data(j.s, l, r));
    j.lane.push_back(&comm_lane(r, j.s.blocks, R));
    j.lane.back()->published.store(0, std::memory_order_relaxed);
    // v3's staging, for the larger of a block's two buckets.
    j.staged.push_back(how == Comm::ring_buckets && R > 1
                           ? static_cast<float*>(staging_buffers().get(
                                 r, static_cast<std::size_t>(segment(std::max(L.w2, L.size - L.w2), R, 0).count) * sizeof(float)))
                           : nullptr);
  }
#if KLAB_HAVE_NCCL
  if (R > 1 && how != Comm::ring_buckets) nccl_comms(R);
#endif
  j.ranks->fork(l.stream);
  j.ranks->each([&](int r) { rank_step(j, r, how); });
  j.ranks->join(l.stream);
}

void run_v1_allreduce_after_backward(const klab::Launch& l) { run_step(l, Comm::after_backward); }
void run_v2_bucket_overlap(const klab::Launch& l) { run_step(l, Comm::nccl_buckets); }
void run_v3_copy_engine_ring(const klab::Launch& l) { run_step(l, Comm::ring_buckets); }

std::string supports_ring(const klab::Problem& p) {
  const DpShape s = dp_shape(p);
  if (std::string why = klab::require_gpus(s.ranks); !why.empty()) return why;
  return parts_missing_or_unsupported(s);
}

std::string supports(const klab::Problem& p) {
#if !KLAB_HAVE_NCCL
  if (p.shape.at(0) > 1) return "more than one rank all-reduces with NCCL, and klab was built without it (the lesson's README)";
#endif
  return supports_ring(p);
}

// ======================================================================================
// stage and gather
// ======================================================================================
void stage(const klab::Launch& l) {
  const DpShape s = dp_shape(l.problem);
  if (s.ranks == 1) return;
  const int64_t P = param_count(s), TC = s.tokens * s.C;
  for (int r = 1; r < s.ranks; ++r) {
    const RankData d = rank_data(s, l, r);
    const int dev = klab::rank_device(r);
    auto put = [&](const void* dst, const void* src, std::size_t bytes) {
      if (bytes) KLAB_CHECK_CUDA(cudaMemcpyPeerAsync(const_cast<void*>(dst), dev, src, 0, bytes, l.stream));
    };
    put(d.x, l.in[0].as<const bf16>() + r * TC, TC * sizeof(bf16));
    put(d.gy, l.in[1].as<const bf16>() + r * TC, TC * sizeof(bf16));
    put(d.params, l.in[2].data, P * sizeof(float));
    put(d.m, l.in[3].data, P * sizeof(float));
    put(d.v, l.in[4].data, P * sizeof(float));
    put(d.p16, l.in[5].data, P * sizeof(bf16));
    put(d.grad, l.out[0].data, P * sizeof(float));   // poisoned
  }
  klab::Ranks::of(s.ranks).flush_l2(l.stream);
}

// Every rank's parameters, moments, bf16 copy and gradient must be rank 0's, bit for bit: the
// ranks applied the same all-reduced gradient with the same kernel. Each replica is brought to
// GPU 0 and compared there.
void gather(const klab::Launch& l) {
  const DpShape s = dp_shape(l.problem);
  if (s.ranks == 1) return;
  const int64_t P = param_count(s);
  static klab::RankBuffers copy, counter;
  auto* differ = static_cast<unsigned long long*>(counter.get(0, sizeof(unsigned long long)));
  for (int r = 1; r < s.ranks; ++r) {
    const RankData d = rank_data(s, l, r);
    const std::pair<const void*, const void*> pairs[] = {{d.params, l.in[2].data}, {d.m, l.in[3].data}, {d.v, l.in[4].data},
                                                         {d.grad, l.out[0].data}};
    const char* names[] = {"parameters", "first moments", "second moments", "gradient"};
    for (int k = 0; k < 5; ++k) {
      const void* theirs = k < 4 ? pairs[k].first : d.p16;
      const void* ours = k < 4 ? pairs[k].second : l.in[5].data;
      const std::size_t bytes = k < 4 ? P * sizeof(float) : P * sizeof(bf16);
      if (bytes == 0) continue;
      void* here = copy.get(0, bytes);
      KLAB_CHECK_CUDA(cudaMemcpyPeerAsync(here, 0, theirs, klab::rank_device(r), bytes, l.stream));
      KLAB_CHECK_CUDA(cudaMemsetAsync(differ, 0, sizeof(unsigned long long), l.stream));
      const int64_t words = static_cast<int64_t>(bytes / 4);
      count_differences<<<klab::grid_stride_blocks(words, 256), 256, 0, l.stream>>>(
          static_cast<const std::uint32_t*>(here), static_cast<const std::uint32_t*>(ours), words, differ);
      KLAB_CHECK_LAUNCH();
      unsigned long long n = 0;
      KLAB_CHECK_CUDA(cudaMemcpyAsync(&n, differ, sizeof n, cudaMemcpyDeviceToHost, l.stream));
      KLAB_CHECK_CUDA(cudaStreamSynchronize(l.stream));
      if (n)
        throw klab::Error("dp_step: rank " + std::to_string(r) + "'s " + (k < 4 ? names[k] : "bf16 parameters") +
                          " differ from rank 0's in " + std::to_string(n) + " words: the replicas diverged");
    }
  }
}

KLAB_REGISTER(klab::register_impl({.op = "dp_step",
                                   .name = "v1_allreduce_after_backward",
                                   .summary = "the whole backward, then one all-reduce of the gradient (NCCL), then AdamW",
                                   .supports = supports,
                                   .run = run_v1_allreduce_after_backward,
                                   .stage = stage,
                                   .gather = gather,
                                   .kernels = {"widen_bf16"}}));
KLAB_REGISTER(klab::register_impl({.op = "dp_step",
                                   .name = "v2_bucket_overlap",
                                   .summary = "two buckets a block, all-reduced by NCCL on a second stream while the backward goes on",
                                   .supports = supports,
                                   .run = run_v2_bucket_overlap,
                                   .stage = stage,
                                   .gather = gather,
                                   .kernels = {"widen_bf16"}}));
KLAB_REGISTER(klab::register_impl({.op = "dp_step",
                                   .name = "v3_copy_engine_ring",
                                   .summary = "v2's buckets all-reduced by the lesson's ring: copy engines move them, a vector add sums",
                                   .supports = supports_ring,
                                   .run = run_v3_copy_engine_ring,
                                   .stage = stage,
                                   .gather = gather,
                                   .kernels = {"widen_bf16"}}));

}  // namespace

klab::Reference dp_step_on_one_gpu(const klab::Problem& p, const klab::Inputs& in) {
  const DpShape s = dp_shape(p), one_rank{1, s.blocks, s.tokens, s.C};
  const klab::Problem one{{1, s.blocks, s.tokens, s.C}, DType::bf16, ""};
  if (std::string why = supports(one); !why.empty()) throw klab::Error("dp_step's one-GPU reference: " + why);
  const int64_t P = param_count(s), TC = s.tokens * s.C;
  std::vector<klab::DeviceTensor> ins;
  for (const klab::HostTensor& t : in.tensors) ins.push_back(klab::to_device(t));
  klab::DeviceTensor grad(DType::f32, {P}), part(DType::f32, {P});
  const Problems pr = problems(one_rank, s.tokens);
  const klab::Problem sum_p{{P}, DType::f32, ""};
  const cudaStream_t st = nullptr;
  RankData d{};
  d.params = ins[2].view().as<float>(), d.m = ins[3].view().as<float>(), d.v = ins[4].view().as<float>();
  d.p16 = ins[5].view().as<bf16>();
  // Rank r's rows in turn, each micro-batch's gradient added to the sum in fp32, rank by rank.
  for (int r = 0; r < s.ranks; ++r) {
    d.x = ins[0].view().as<const bf16>() + r * TC, d.gy = ins[1].view().as<const bf16>() + r * TC;
    d.grad = r == 0 ? grad.view().as<float>() : part.view().as<float>();
    Carver size{nullptr};
    carve_activations(one_rank, size, d);
    Carver c{static_cast<char*>(activation_buffers().get(0, size.used))};
    carve_activations(one_rank, c, d);
    for (int64_t b = 0; b < s.blocks; ++b) forward_block(one_rank, pr, d, b, st);
    for (int64_t b = s.blocks - 1; b >= 0; --b) backward_block(one_rank, pr, d, b, st);
    if (r > 0)
      launch(kAdd, sum_p, {view(grad.data(), DType::f32, {P}), view(part.data(), DType::f32, {P})},
             {view(grad.data(), DType::f32, {P})}, kNoScalars, d, st);
  }
  d.grad = grad.view().as<float>();
  adamw(one_rank, pr, d, in.scalars, st);
  KLAB_CHECK_CUDA(cudaDeviceSynchronize());
  klab::Reference ref;
  auto fetch = [&](const klab::DeviceTensor& t) {
    klab::HostTensor h(t.view().dtype, t.view().shape);
    klab::copy_to_host(t, h);
    klab::RefArray a(static_cast<std::size_t>(h.numel()));
    klab::parallel_for(h.numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) a[i] = h.get(i);
    });
    ref.push_back(std::move(a));
  };
  fetch(grad);
  for (int k = 2; k < 6; ++k) fetch(ins[k]);
  return ref;
}

}  // namespace lesson16
