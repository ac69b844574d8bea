// Lesson 06 — the backward of the linear layer's GELU and bias (op linear_dgelu_bgrad,
// linear_backward_ops.cu): dz = (dy · w) ⊙ gelu'(z) and db = Σ_m dz, after the matmul and
// inside it. Both versions run lesson 05's best Hopper matmul (v19_tma_store's kernel) in its
// nn layout, and both leave db as one partial row per 64 rows of dz, which
// klab::sum_partial_rows (klab/reduce.hpp) adds up in a fixed order: db has the same bits
// every run.
//
//   v1_matmul_then_dgelu_bgrad  the matmul writes dh = dy · w to dz in bf16; a second kernel
//                               reads dh and z back, writes dz over dh, and sums its block's
//                               64 rows of dz into a partial row. It moves 3·M·N·2 bytes
//                               (8192 x 3072: 151 MB) where the fused version moves the
//                               M·N·2 of z, and rounds dh to bf16 once more.
//   v2_fused_epilogue           on the fp32 accumulators, between the tile's last MMA and its
//                               store (EpiDGeluBGrad): gelu'(z) multiplied in, z copied by
//                               TMA into the store's staging area during the main loop; then
//                               the column sums of the tile's rows taken in registers, across
//                               the lanes by shuffles and across the warps in shared memory.
//
// Both take the shapes lesson 05's TMA versions take in the nn layout (N and K, the row
// pitches of w and dy, multiples of 8); cublaslt_epilogue takes what its heuristic takes.
//
//   klab test 06 --op linear_dgelu_bgrad
//   klab bench 06 --op linear_dgelu_bgrad
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "fusion.cuh"
#include "klab/device/activation.cuh"
#include "klab/device/mbarrier.cuh"
#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/math.hpp"
#include "klab/op.hpp"
#include "klab/reduce.hpp"
#include "linear_wgmma.cuh"

namespace lesson06 {
namespace {

using std::int64_t;

// db's partial rows: one per 64 rows of dz, each N floats (the workspace of both versions).
constexpr int kPartRows = 64;
int64_t part_rows(int64_t M) { return klab::ceil_div<int64_t>(M, kPartRows); }
std::size_t workspace(const klab::Problem& p) {
  return static_cast<std::size_t>(part_rows(p.shape[0]) * p.shape[1]) * sizeof(float);
}

// ======================================================================================
// v1_matmul_then_dgelu_bgrad: the second kernel
// ======================================================================================
// Block: 8 warps over 64 rows (rows w, w + 8, ...) by 256 columns, each thread 8 columns
// (one 16-byte vector of dh, of z and of dz; N is a multiple of 8). Each thread keeps its 8
// columns' sums over its 8 rows; the 8 warps' sums meet in shared memory and the block's 256
// threads write one partial-row entry each. Grid: (N / 256 rounded up, M / 64 rounded up).
__global__ void __launch_bounds__(256)
linear_dgelu_bgrad_v1_matmul_then_dgelu_bgrad(bf16* __restrict__ g_dz, const bf16* __restrict__ g_z,
                                             float* __restrict__ g_part, int M, int N) {
  using Vec = klab::Vec<bf16, 8>;
  __shared__ float s_sum[8][256];                          // (warp, column in the block)
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int n = blockIdx.x * 256 + 8 * lane;               // this thread's first column
  const int m0 = blockIdx.y * kPartRows;
  float r_sum[8] = {};
  if (n < N) {
    for (int m = m0 + warp; m < min(M, m0 + kPartRows); m += 8) {
      Vec* p_dz = reinterpret_cast<Vec*>(g_dz + static_cast<int64_t>(m) * N + n);
      const Vec r_z = *reinterpret_cast<const Vec*>(g_z + static_cast<int64_t>(m) * N + n);
      Vec r_dz = *p_dz;                                    // dh, as the matmul stored it
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float dz = __bfloat162float(r_dz.v[k]) * klab::gelu_tanh_grad(__bfloat162float(r_z.v[k]));
        r_sum[k] += dz;
        r_dz.v[k] = __float2bfloat16_rn(dz);
      }
      *p_dz = r_dz;
    }
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) s_sum[warp][8 * lane + k] = r_sum[k];
  __syncthreads();
  const int c = blockIdx.x * 256 + threadIdx.x;
  if (c < N) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < 8; ++w) s += s_sum[w][threadIdx.x];
    g_part[static_cast<int64_t>(blockIdx.y) * N + c] = s;
  }
}

}  // namespace

// ======================================================================================
// v2_fused_epilogue: the epilogue
// ======================================================================================
// Lesson 05's Hopper matmul calls apply() on each MMA thread's accumulators before it stores
// them (matmul_wgmma.cuh: r_acc[4j + 2h + e] is dh at (row + 8h, col + 8j + e)); a warpgroup
// owns 64 rows of the tile, each of its 4 warps 16 of them, each lane 2 rows (h) by ACC / 2
// columns. z is the matmul's source tile: the kernel copies the warpgroup's 64 x BN block of
// it by TMA into the TMA store's staging area while the main loop runs, and apply() reads it
// there with ldmatrix, already in the accumulators' layout (src.load). Rows past M and
// columns past N hold dh = 0 and z = 0 (TMA fills both), so they add nothing. apply()
// multiplies in gelu'(z) and leaves dz in r_acc for the store; then it sums the warpgroup's
// 64 rows, column by column, into one partial row of db:
//   1. each lane adds its two rows (h = 0, 1);
//   2. the 8 lanes that hold the same columns (lane / 4 = 0..7, lane bits 4, 3, 2) add theirs
//      by recursive halving: at each of three steps a lane keeps half of its values and
//      sends the other half to the lane across that bit, which adds what it receives to the
//      half it keeps — 4 + 2 + 1 shuffles for 8 values (an all-reduce would take 24), and
//      each lane ends with whole sums over the warp's 16 rows for 1/8 of the columns;
//   3. the 4 warps' sums go through shared memory, and each of the 128 threads adds up its
//      columns over the 4 warps, in order, and stores them to the partial row.
// The values are taken 8 at a time (4 column pairs, two ldmatrix steps): beside the tile's
// 128 accumulators a thread has 40 of its 168 registers left (__launch_bounds__(384, 1)).
struct EpiDGeluBGrad {
  const void* source;  // z (M, N): the matmul's source tile
  float* g_part;       // (part_rows(M), N)
  int M, N;
  static constexpr bool kSourceTile = true;
  static constexpr int kTileCols = 256;                       // the widest tile (lesson 05's BN)
  static constexpr int kChunk = 8;                             // column values a step-2 round takes
  static constexpr int kSlots = kTileCols / 4 / 8;             // sums a lane ends with, at the widest tile
  // Each warp's sums, [lane][kSlots + 1]: the odd row length keeps the 32 lanes' stores in
  // different banks.
  static constexpr int kSmemBytes = 4 * 32 * (kSlots + 1) * 4;
  __device__ __forceinline__ void load_tile(unsigned char*, int, int) const {}

  template <int ACC>
  __device__ __forceinline__ void apply(float (&r_acc)[ACC], int row, int col, unsigned char* s_epi,
                                        const lesson05::SourceTile& src) const {
    constexpr int BN = 2 * ACC, NV = ACC / 2, SLOTS = NV / 8, STRIDE = SLOTS + 1;
    static_assert(BN <= kTileCols && NV % kChunk == 0 && kChunk == 8, "a tile of 128 or 256 columns, 8 values a round");
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    float* s_red = reinterpret_cast<float*>(s_epi);            // [warp][lane][STRIDE]
#pragma unroll
    for (int ch = 0; ch < NV / kChunk; ++ch) {                  // column pairs j = 4 ch .. 4 ch + 3
      float v[kChunk];
#pragma unroll
      for (int t = 0; t < 2; ++t) {                             // ldmatrix step jn = 2 ch + t: j = 2 jn, 2 jn + 1
        const int jn = 2 * ch + t;
        uint32_t z[4];
        src.load(jn, z);
#pragma unroll
        for (int i = 0; i < 4; ++i) {                           // r_acc[8 jn + 2i], r_acc[8 jn + 2i + 1]
          const float2 zf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&z[i]));
          r_acc[8 * jn + 2 * i] *= klab::gelu_tanh_grad(zf.x);
          r_acc[8 * jn + 2 * i + 1] *= klab::gelu_tanh_grad(zf.y);
        }
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {                        // step 1: rows h = 0 and 1
          const int j = 2 * jn + jj;
          v[4 * t + 2 * jj] = r_acc[4 * j] + r_acc[4 * j + 2];
          v[4 * t + 2 * jj + 1] = r_acc[4 * j + 1] + r_acc[4 * j + 3];
        }
      }
#pragma unroll
      for (int s = 0; s < 3; ++s) {                             // step 2: lane bits 4, 3, 2
        const int x = 16 >> s, half = kChunk >> (s + 1);
        const bool up = lane & x;
#pragma unroll
        for (int i = 0; i < half; ++i) {
          const float send = up ? v[i] : v[i + half];
          const float keep = up ? v[i + half] : v[i];
          v[i] = keep + __shfl_xor_sync(0xffffffffu, send, x);
        }
      }
      // v[0] is now the sum over the warp's 16 rows of the chunk's value lane / 4.
      s_red[(warp * 32 + lane) * STRIDE + ch] = v[0];
    }
    // The warpgroup's four warps' sums are in. Barriers 4 and 5 (the kernel's own are 0, 1 and 2).
    klab::named_barrier_sync(3 + threadIdx.x / 128, 128);
    // Step 3. Column c of the tile is value vi = 2 (c / 8) + c % 2 of lanes 4q + (c % 8) / 2,
    // in chunk vi / 8 with q = vi % 8.
    const int row0 = row - 16 * warp - lane / 4, n0 = col - 2 * (lane % 4);   // the warpgroup's first row and column
    if (row0 >= M) return;
#pragma unroll
    for (int c = threadIdx.x % 128; c < BN; c += 128) {
      const int vi = 2 * (c / 8) + c % 2;
      const int src_lane = 4 * (vi % kChunk) + (c % 8) / 2, slot = vi / kChunk;
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < 4; ++w) s += s_red[(w * 32 + src_lane) * STRIDE + slot];
      if (n0 + c < N) g_part[static_cast<int64_t>(row0 / kPartRows) * N + n0 + c] = s;
    }
  }
};

namespace {

// ======================================================================================
// Launchers
// ======================================================================================
// M = 0: db = 0. K = 0: dh = 0, so dz = 0 and db = 0. Returns true when that was all.
bool empty_product(const klab::Launch& l) {
  const int64_t M = l.problem.shape[0], N = l.problem.shape[1], K = l.problem.shape[2];
  if (N == 0) return true;
  if (M > 0 && K > 0) return false;
  if (M > 0) KLAB_CHECK_CUDA(cudaMemsetAsync(l.out[0].data, 0, static_cast<std::size_t>(M * N) * sizeof(bf16), l.stream));
  KLAB_CHECK_CUDA(cudaMemsetAsync(l.out[1].data, 0, static_cast<std::size_t>(N) * sizeof(float), l.stream));
  return true;
}

void run_v1_matmul_then_dgelu_bgrad(const klab::Launch& l) {
  if (empty_product(l)) return;
  const int M = static_cast<int>(l.problem.shape[0]), N = static_cast<int>(l.problem.shape[1]);
  float* part = static_cast<float*>(l.workspace);
  launch_backward_wgmma(l, lesson05::NoEpilogue{});
  const dim3 grid(static_cast<unsigned>(klab::ceil_div(N, 256)), static_cast<unsigned>(part_rows(M)));
  linear_dgelu_bgrad_v1_matmul_then_dgelu_bgrad<<<grid, 256, 0, l.stream>>>(l.out[0].as<bf16>(), l.in[2].as<const bf16>(),
                                                                            part, M, N);
  KLAB_CHECK_LAUNCH();
  klab::sum_partial_rows(part, part_rows(M), N, l.out[1].as<float>(), l.stream);
}

void run_v2_fused_epilogue(const klab::Launch& l) {
  if (empty_product(l)) return;
  const int M = static_cast<int>(l.problem.shape[0]), N = static_cast<int>(l.problem.shape[1]);
  float* part = static_cast<float*>(l.workspace);
  launch_backward_wgmma(l, EpiDGeluBGrad{l.in[2].data, part, M, N});
  klab::sum_partial_rows(part, part_rows(M), N, l.out[1].as<float>(), l.stream);
}

// "" when lesson 05's Hopper matmul takes this problem in the nn layout, else why not.
std::string supports(const klab::Problem& p) {
  klab::Problem mm = p;
  mm.variant = "nn";
  return lesson05::supports_wgmma(mm);
}

std::string supports_v1(const klab::Problem& p) {
  if (part_rows(p.shape[0]) > 65535) return "the second kernel's grid takes up to 65,535 blocks of 64 rows";
  return supports(p);
}

// v1 rounds dh to bf16 before the product with gelu'(z): inside the op's tolerances
// (linear_backward_ops.cu), which count that rounding.
KLAB_REGISTER(klab::register_impl({.op = "linear_dgelu_bgrad", .name = "v1_matmul_then_dgelu_bgrad",
                                   .summary = "lesson 05's v19 matmul writes dh; a kernel reads it back for gelu' and the column sums",
                                   .kind = klab::ImplKind::cuda, .supports = supports_v1, .workspace = workspace,
                                   .run = run_v1_matmul_then_dgelu_bgrad,
                                   .kernels = {"matmul_wgmma@true, false, __nv_bfloat16, lesson05::(anonymous namespace)::NoEpilogue",
                                               "linear_dgelu_bgrad_v1_matmul_then_dgelu_bgrad"}}));
KLAB_REGISTER(klab::register_impl({.op = "linear_dgelu_bgrad", .name = "v2_fused_epilogue",
                                   .summary = "gelu' and the column sums of db on the fp32 accumulators before v19's TMA store",
                                   .kind = klab::ImplKind::cuda, .supports = supports, .workspace = workspace,
                                   .run = run_v2_fused_epilogue, .kernels = {"matmul_wgmma@EpiDGeluBGrad"}}));

}  // namespace
}  // namespace lesson06
