// Lesson 05 — matmul on the CUDA cores (fp32 SIMT), register tiles: each thread computes
// several outputs and keeps them in registers. v1..v3 (global memory, shared-memory tiles)
// are in matmul_simt.cu.
//
//   v4_regtile_1d   64x64 tiles, BK 8; each thread computes 8 outputs of a column, keeping
//                   the B value in a register across them (fewer shared loads per FMA)
//   v5_regtile_2d   128x128 tiles; each thread an 8x8 block: an outer product per k, 16
//                   shared loads for 64 FMAs
//   v6_vectorized   v5 with 16-byte global loads, float4 shared loads and float4 stores
//                   (the same kernel as v5, instantiated with VEC)
//   v7_warptiling   warp tiles (64x32) whose lanes read conflict-free float4 rows of the
//                   shared tiles, 4x4 sub-tiles per lane, and a register-staged double buffer
//                   (the next tile's global loads overlap the current tile's FMAs); for ops
//                   matmul and matmul_batched (blockIdx.z over the batch)
//   v8_autotuned    v7's kernel in eleven tile configurations, with an interior path (blocks
//                   inside M and N load whole K tiles without per-chunk bounds); the first
//                   call for a shape times them all and caches the winner (klab/autotune.hpp);
//                   for ops matmul and matmul_batched
//
// v7's kernel also computes split-K's fp32 partials (launch_warptile_f32, matmul_splitk.cu).
// Every version handles any M, N, K (tiles are zero-filled past the edges, stores are
// guarded) and the three layouts nn / tn / nt (template booleans A_KMAJ, B_KMAJ; see
// matmul.cuh). The vector paths need 16-byte aligned rows (K or M or N a multiple of 4 as
// the layout requires); otherwise the same kernel is instantiated with scalar loads.
//
//   klab test 05 --op matmul,matmul_batched --dtype f32
//   klab bench 05 --op matmul --dtype f32 --variant nn --shape 4096x4096x4096
//
// The CPU reference: matmul_ops.cu (reference_gemm).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "matmul.cuh"

namespace lesson05 {
namespace {

using std::int64_t;

// ======================================================================================
// Tile loader of v4..v8: copies the (BX x BK) tile of an operand whose rows are X (= M for
// A, N for B) into shared memory as s[k][x] (row pitch SP floats), zero-filled outside
// [0, X) x [0, k_len). Work is cut into chunks of 4 elements along the operand's contiguous
// dimension, so that VEC turns a chunk into one 16-byte load.
//   KMAJ (contiguous along K):  chunk = (x, k..k+3)  -> 4 scattered stores s[k+j][x]
//   MN-major (contiguous in X): chunk = (x..x+3, k)  -> one float4 store s[k][x..x+3]
// SP = BX + 4 makes the scattered stores of a warp fall into distinct banks and keeps every
// s[k] row 16-byte aligned for the float4 reads of the compute loop.
// fetch() and store() are split so that v7 can hold a tile in registers between them.
// ======================================================================================
template <int BX, int BK, int SP, int NT, bool KMAJ, bool VEC>
struct TileLoader {
  static constexpr int CHUNKS = BX * BK / 4;
  static constexpr int PER_THREAD = (CHUNKS + NT - 1) / NT;  // v4 has fewer chunks than threads
  __device__ __forceinline__ static bool live(int c) { return CHUNKS % NT == 0 || c < CHUNKS; }
  static_assert(BX % 4 == 0 && BK % 4 == 0 && SP % 4 == 0, "float4 chunks");

  __device__ __forceinline__ static void coords(int c, int& x, int& k) {
    if (KMAJ) { x = c / (BK / 4); k = (c % (BK / 4)) * 4; }
    else      { k = c / (BX / 4); x = (c % (BX / 4)) * 4; }
  }

  __device__ __forceinline__ static void fetch(const float* g_src, int64_t ld, int x0, int k0, int X,
                                               int k_len, int tid, float4 (&r_chunk)[PER_THREAD]) {
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
      if (!live(tid + i * NT)) break;
      int x, k;
      coords(tid + i * NT, x, k);
      const int gx = x0 + x, gk = k0 + k;
      const float* g_p = KMAJ ? g_src + static_cast<int64_t>(gx) * ld + gk : g_src + static_cast<int64_t>(gk) * ld + gx;
      const bool whole = KMAJ ? (gx < X && gk + 3 < k_len) : (gk < k_len && gx + 3 < X);
      if (VEC && whole) {
        r_chunk[i] = __ldg(reinterpret_cast<const float4*>(g_p));
      } else {  // element by element, each guarded (edges, or rows not 16-byte aligned)
        float r_v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const bool in = KMAJ ? (gx < X && gk + j < k_len) : (gk < k_len && gx + j < X);
          r_v[j] = in ? g_p[j] : 0.f;
        }
        r_chunk[i] = make_float4(r_v[0], r_v[1], r_v[2], r_v[3]);
      }
    }
  }

  // LINEAR: every thread copies whole chunks, and chunk i of a thread lies I_ROWS rows of
  // the operand after its chunk 0 (the thread count is a multiple of the chunks per row).
  // Then store() needs one base address, and interior tiles (every chunk in bounds, 16-byte
  // aligned rows) skip the per-chunk coordinates and bounds: a tile is one pointer plus
  // fixed strides. origin() is chunk 0 of K tile 0.
  static constexpr bool LINEAR = CHUNKS % NT == 0 && NT % (KMAJ ? BK / 4 : BX / 4) == 0;
  static constexpr int I_ROWS = NT / (KMAJ ? BK / 4 : BX / 4);
  __device__ __forceinline__ static const float* origin(const float* g_src, int64_t ld, int x0, int tid) {
    int x, k;
    coords(tid, x, k);
    return KMAJ ? g_src + static_cast<int64_t>(x0 + x) * ld + k : g_src + static_cast<int64_t>(k) * ld + x0 + x;
  }
  __device__ __forceinline__ static void fetch_interior(const float* g_p, int64_t ld, float4 (&r_chunk)[PER_THREAD]) {
    const int64_t step = I_ROWS * ld;
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) r_chunk[i] = __ldg(reinterpret_cast<const float4*>(g_p + i * step));
  }

  __device__ __forceinline__ static void store(float* s_tile, int tid, const float4 (&r_chunk)[PER_THREAD]) {
    // LINEAR: chunk i is I_ROWS rows (KMAJ: columns of the shared tile) after chunk 0, so
    // one base address and immediate offsets, no per-chunk division.
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
      if (!live(tid + i * NT)) break;
      int x, k;
      coords(LINEAR ? tid : tid + i * NT, x, k);
      if constexpr (LINEAR) (KMAJ ? x : k) += i * I_ROWS;  // chunk i from chunk 0
      if (KMAJ) {
        s_tile[(k + 0) * SP + x] = r_chunk[i].x;
        s_tile[(k + 1) * SP + x] = r_chunk[i].y;
        s_tile[(k + 2) * SP + x] = r_chunk[i].z;
        s_tile[(k + 3) * SP + x] = r_chunk[i].w;
      } else {
        *reinterpret_cast<float4*>(&s_tile[k * SP + x]) = r_chunk[i];
      }
    }
  }

  __device__ __forceinline__ static void load(const float* g_src, int64_t ld, int x0, int k0, int X,
                                              int k_len, int tid, float* s_tile) {
    float4 r_chunk[PER_THREAD];
    fetch(g_src, ld, x0, k0, X, k_len, tid, r_chunk);
    store(s_tile, tid, r_chunk);
  }
};

// ======================================================================================
// v4_regtile_1d — 64x64 C tile, BK = 8, 512 threads; thread t computes rows
// 8·(t / 64) .. +7 of column t % 64. Per k: one shared load of B reused for 8 FMAs, and
// 8 A loads that all lanes of a warp share (same rows: broadcast).
// ======================================================================================
template <bool AK, bool BK>
__global__ void __launch_bounds__(512) matmul_v4_regtile_1d(GemmArgs g) {
  constexpr int BM = 64, BN = 64, BKT = 8, TM = 8, NT = BM * BN / TM, SPA = BM + 4, SPB = BN + 4;
  static_assert(NT == 512, "the launch bound and run_v4_regtile_1d's block: one thread per TM outputs");
  static_assert(BM % TM == 0 && NT % BN == 0 && (NT / BN) * TM == BM, "threads cover the tile: column t % BN, TM rows");
  __shared__ __align__(16) float s_A[BKT * SPA];  // (BK, BM) k-major rows
  __shared__ __align__(16) float s_B[BKT * SPB];  // (BK, BN)
  const auto z = z_slice<AK, BK, float, float>(g);
  const int tid = threadIdx.x;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int col = tid % BN, row0 = (tid / BN) * TM;
  float r_acc[TM] = {};
  for (int k0 = 0; k0 < z.k_len; k0 += BKT) {
    TileLoader<BM, BKT, SPA, NT, AK, false>::load(z.A, g.lda, m0, k0, g.M, z.k_len, tid, s_A);
    TileLoader<BN, BKT, SPB, NT, BK, false>::load(z.B, g.ldb, n0, k0, g.N, z.k_len, tid, s_B);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BKT; ++k) {
      const float b = s_B[k * SPB + col];
#pragma unroll
      for (int i = 0; i < TM; ++i) r_acc[i] += s_A[k * SPA + row0 + i] * b;
    }
    __syncthreads();
  }
  const int n = n0 + col;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = m0 + row0 + i;
    if (m < g.M && n < g.N) z.C[static_cast<int64_t>(m) * g.ldc + n] = r_acc[i];
  }
}

// ======================================================================================
// v5_regtile_2d (VEC = false) and v6_vectorized (VEC = true) — 128x128 C tile, BK = 8,
// 256 threads as 16x16; thread (tr, tc) owns the 8x8 block rows 8·tr.., columns 8·tc...
// Per k: 8 A values and 8 B values into registers, then their outer product (64 FMAs).
// v6 changes only memory instructions: 16-byte global loads (when rows are aligned), two
// float4 shared loads instead of eight scalar ones per operand, and float4 stores of C.
// ======================================================================================
template <bool AK, bool BK, bool VEC>
__global__ void __launch_bounds__(256) matmul_v5_regtile_2d(GemmArgs g, bool c_vec) {
  constexpr int BM = 128, BN = 128, BKT = 8, TM = 8, TN = 8, NT = 256, SPA = BM + 4, SPB = BN + 4;
  static_assert((BM / TM) * (BN / TN) == NT, "one thread per TM x TN block (the launch bound: 256)");
  static_assert(BM % TM == 0 && BN % TN == 0 && TM % 4 == 0 && TN % 4 == 0, "whole blocks, float4 reads and stores");
  __shared__ __align__(16) float s_A[BKT * SPA];  // (BK, BM)
  __shared__ __align__(16) float s_B[BKT * SPB];  // (BK, BN)
  const auto z = z_slice<AK, BK, float, float>(g);
  const int tid = threadIdx.x;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int tr = tid / (BN / TN), tc = tid % (BN / TN);
  float r_acc[TM][TN] = {};
  float r_a[TM], r_b[TN];
  for (int k0 = 0; k0 < z.k_len; k0 += BKT) {
    TileLoader<BM, BKT, SPA, NT, AK, VEC>::load(z.A, g.lda, m0, k0, g.M, z.k_len, tid, s_A);
    TileLoader<BN, BKT, SPB, NT, BK, VEC>::load(z.B, g.ldb, n0, k0, g.N, z.k_len, tid, s_B);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BKT; ++k) {
      if (VEC) {
#pragma unroll
        for (int i = 0; i < TM; i += 4) {
          const float4 a = *reinterpret_cast<const float4*>(&s_A[k * SPA + tr * TM + i]);
          r_a[i] = a.x, r_a[i + 1] = a.y, r_a[i + 2] = a.z, r_a[i + 3] = a.w;
        }
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
          const float4 b = *reinterpret_cast<const float4*>(&s_B[k * SPB + tc * TN + j]);
          r_b[j] = b.x, r_b[j + 1] = b.y, r_b[j + 2] = b.z, r_b[j + 3] = b.w;
        }
      } else {
#pragma unroll
        for (int i = 0; i < TM; ++i) r_a[i] = s_A[k * SPA + tr * TM + i];
#pragma unroll
        for (int j = 0; j < TN; ++j) r_b[j] = s_B[k * SPB + tc * TN + j];
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) r_acc[i][j] += r_a[i] * r_b[j];  // outer product
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = m0 + tr * TM + i;
    if (m >= g.M) break;
    float* g_c = z.C + static_cast<int64_t>(m) * g.ldc;
#pragma unroll
    for (int j = 0; j < TN; j += 4) {
      const int n = n0 + tc * TN + j;
      if (VEC && c_vec && n + 3 < g.N) {
        *reinterpret_cast<float4*>(g_c + n) = make_float4(r_acc[i][j], r_acc[i][j + 1], r_acc[i][j + 2], r_acc[i][j + 3]);
      } else {
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
          if (n + jj < g.N) g_c[n + jj] = r_acc[i][j + jj];
      }
    }
  }
}

// ======================================================================================
// v7_warptiling — the block tile is split into warp tiles (WM x WN); inside a warp tile
// the 32 lanes form an 8 (M) x 4 (N) grid and each lane owns MI x NI sub-tiles of 4x4:
//
//   rows of lane (lm, ln):  wm0 + i·32 + lm·4 + 0..3   (i < MI)      lm = lane / 4
//   cols of lane (lm, ln):  wn0 + j·16 + ln·4 + 0..3   (j < NI)      ln = lane % 4
//
// so per k a warp reads 8 distinct float4 of A (128 contiguous bytes: one conflict-free
// wavefront, each value broadcast to 4 lanes) and 4 distinct float4 of B. Global loads of
// tile k+1 go to registers before the FMAs of tile k and to the other shared buffer after
// them, so memory latency hides behind arithmetic; one barrier per K tile.
// ======================================================================================
template <int BM_, int BN_, int BK_, int WM_, int WN_, int MIN_BLOCKS_ = 1, bool INTERIOR_ = true>
struct WarpTileConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_;
  static constexpr int MIN_BLOCKS = MIN_BLOCKS_;   // blocks per SM the registers must allow
  static constexpr bool INTERIOR = INTERIOR_;      // interior tiles load without bounds (v8)
  static constexpr int LM = 8, LN = 4;                  // lanes along M and N
  static constexpr int MI = WM / (LM * 4), NI = WN / (LN * 4);
  static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
  static constexpr int NT = WARPS_M * WARPS_N * 32;
  static constexpr int SPA = BM + 4, SPB = BN + 4;
  static constexpr int SMEM_FLOATS = 2 * BK * (SPA + SPB);  // double buffer
  static constexpr int SMEM_BYTES = SMEM_FLOATS * 4;
  static_assert(MI >= 1 && NI >= 1 && WM % 32 == 0 && WN % 16 == 0, "warp tile = lanes x 4x4 sub-tiles");
  static_assert(BM % WM == 0 && BN % WN == 0, "warps tile the block");
  static_assert(NT <= 1024 && BK % 4 == 0, "a block of at most 1024 threads; whole float4 chunks along K");
  static_assert(SMEM_BYTES <= 227 * 1024, "over the 227 KB a block may use");
};

template <class Cfg, bool AK, bool BK, bool VEC>
__global__ void __launch_bounds__(Cfg::NT, Cfg::MIN_BLOCKS) matmul_v7_warptiling(GemmArgs g, bool c_vec) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BKT = Cfg::BK, NT = Cfg::NT;
  constexpr int SPA = Cfg::SPA, SPB = Cfg::SPB, MI = Cfg::MI, NI = Cfg::NI;
  using LoadA = TileLoader<BM, BKT, SPA, NT, AK, VEC>;
  using LoadB = TileLoader<BN, BKT, SPB, NT, BK, VEC>;
  // Dynamic shared memory: the larger configurations need more than the 48 KB static limit.
  extern __shared__ __align__(16) float s_buf[];
  auto s_A = [&](int stage) { return s_buf + stage * BKT * SPA; };                  // (2, BK, BM)
  auto s_B = [&](int stage) { return s_buf + 2 * BKT * SPA + stage * BKT * SPB; };  // (2, BK, BN)

  const auto z = z_slice<AK, BK, float, float>(g);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int wm0 = (warp / Cfg::WARPS_N) * Cfg::WM, wn0 = (warp % Cfg::WARPS_N) * Cfg::WN;
  const int lm = lane / Cfg::LN, ln = lane % Cfg::LN;

  float r_acc[MI * 4][NI * 4] = {};
  float4 r_ga[LoadA::PER_THREAD], r_gb[LoadB::PER_THREAD];  // next tile, in flight
  const int k_tiles = (z.k_len + BKT - 1) / BKT;

  // K tile kt into r_ga / r_gb. A block whose tile lies inside M and N (most of them) takes
  // the interior path for every whole K tile: one pointer per operand and fixed strides,
  // instead of the coordinates and bounds of every chunk (in the SASS of v8's 256x128 tile
  // those were a visible share of each K tile's instructions beside its FFMAs).
  constexpr bool FAST = Cfg::INTERIOR && VEC && LoadA::LINEAR && LoadB::LINEAR;
  const bool interior = FAST && m0 + BM <= g.M && n0 + BN <= g.N;
  const float* g_pa = LoadA::origin(z.A, g.lda, m0, tid);
  const float* g_pb = LoadB::origin(z.B, g.ldb, n0, tid);
  const int64_t a_kstep = AK ? BKT : BKT * g.lda, b_kstep = BK ? BKT : BKT * g.ldb;
  auto fetch = [&](int kt) {
    if (interior && (kt + 1) * BKT <= z.k_len) {
      LoadA::fetch_interior(g_pa + kt * a_kstep, g.lda, r_ga);
      LoadB::fetch_interior(g_pb + kt * b_kstep, g.ldb, r_gb);
    } else {
      LoadA::fetch(z.A, g.lda, m0, kt * BKT, g.M, z.k_len, tid, r_ga);
      LoadB::fetch(z.B, g.ldb, n0, kt * BKT, g.N, z.k_len, tid, r_gb);
    }
  };

  if (k_tiles > 0) {
    fetch(0);
    LoadA::store(s_A(0), tid, r_ga);
    LoadB::store(s_B(0), tid, r_gb);
    __syncthreads();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int cur = kt & 1;
    const bool more = kt + 1 < k_tiles;
    if (more) fetch(kt + 1);  // issue the loads of tile kt+1; they complete while we compute tile kt
    const float* s_a = s_A(cur);
    const float* s_b = s_B(cur);
#pragma unroll
    for (int k = 0; k < BKT; ++k) {
      float r_a[MI * 4], r_b[NI * 4];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const float4 v = *reinterpret_cast<const float4*>(&s_a[k * SPA + wm0 + i * 32 + lm * 4]);
        r_a[i * 4 + 0] = v.x, r_a[i * 4 + 1] = v.y, r_a[i * 4 + 2] = v.z, r_a[i * 4 + 3] = v.w;
      }
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        const float4 v = *reinterpret_cast<const float4*>(&s_b[k * SPB + wn0 + j * 16 + ln * 4]);
        r_b[j * 4 + 0] = v.x, r_b[j * 4 + 1] = v.y, r_b[j * 4 + 2] = v.z, r_b[j * 4 + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < MI * 4; ++i)
#pragma unroll
        for (int j = 0; j < NI * 4; ++j) r_acc[i][j] += r_a[i] * r_b[j];
    }
    if (more) {  // the other buffer was last read in iteration kt-1, before its barrier
      LoadA::store(s_A(cur ^ 1), tid, r_ga);
      LoadB::store(s_B(cur ^ 1), tid, r_gb);
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < MI * 4; ++i) {
    const int m = m0 + wm0 + (i / 4) * 32 + lm * 4 + (i % 4);
    if (m >= g.M) continue;
    float* g_c = z.C + static_cast<int64_t>(m) * g.ldc;
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const int n = n0 + wn0 + j * 16 + ln * 4;
      if (c_vec && n + 3 < g.N) {
        *reinterpret_cast<float4*>(g_c + n) =
            make_float4(r_acc[i][j * 4], r_acc[i][j * 4 + 1], r_acc[i][j * 4 + 2], r_acc[i][j * 4 + 3]);
      } else {
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
          if (n + jj < g.N) g_c[n + jj] = r_acc[i][j * 4 + jj];
      }
    }
  }
}

// v7's configuration, and the ones v8 chooses from. Big tiles reuse each loaded element
// more; small tiles make more blocks, for outputs too small to fill 132 SMs. v8's
// candidates also take the interior path (INTERIOR, the default; two whose registers it
// would spill do not): fewer instructions per FFMA in the loop (the README has the SASS
// counts and times).
using CfgV7 = WarpTileConfig<128, 128, 16, 64, 32, 1, false>;
using Cfg128x128 = WarpTileConfig<128, 128, 16, 64, 32>;
using Cfg128x64 = WarpTileConfig<128, 64, 16, 64, 32>;
using Cfg64x128 = WarpTileConfig<64, 128, 16, 32, 64>;
using Cfg64x64 = WarpTileConfig<64, 64, 16, 32, 32>;
using Cfg128x128k8 = WarpTileConfig<128, 128, 8, 32, 64>;
// Larger thread tiles (8x16 and 16x8 outputs per thread, 128 accumulators): 6 float4 shared
// loads per 128 FMAs instead of 4 per 64, at the price of one 256-thread block per SM.
using Cfg128x256k8 = WarpTileConfig<128, 256, 8, 64, 64>;
using Cfg256x128k8 = WarpTileConfig<256, 128, 8, 128, 32>;
// The same thread tiles with BK 16 (half the barriers per FMA), and 128x128 with 4 warps of
// 64x64: a small block (128 threads) so that 2-3 blocks share an SM and one block's barrier
// stall overlaps another's FMAs.
using Cfg128x256 = WarpTileConfig<128, 256, 16, 64, 64>;
using Cfg256x128 = WarpTileConfig<256, 128, 16, 128, 32>;
using Cfg128x128w64 = WarpTileConfig<128, 128, 16, 64, 64, 1, false>;  // (interior: spills)
// v7's tile with registers capped at 128 so that two blocks (16 warps) share an SM: left to
// itself the compiler takes more than 128 registers, one block per SM.
using Cfg128x128x2 = WarpTileConfig<128, 128, 16, 64, 32, 2, false>;  // (interior: spills)

// ======================================================================================
// Launchers (K == 0 with M·N > 0 still launches: the kernels then write C = 0)
// ======================================================================================
bool c_vec_ok(const GemmArgs& g) {
  return reinterpret_cast<std::uintptr_t>(g.C) % 16 == 0 && g.ldc % 4 == 0 && g.sC % 4 == 0;
}

void run_v4_regtile_1d(const klab::Launch& l) {
  GemmArgs g = gemm_args(l);
  if (empty_output(g)) return;
  const dim3 grid = tile_grid(g, 64, 64, shape_of(l.problem).batch);
  dispatch_layout(l.problem.variant, [&]<bool AK, bool BK>() {
    matmul_v4_regtile_1d<AK, BK><<<grid, 512, 0, l.stream>>>(g);
  });
  KLAB_CHECK_LAUNCH();
}

void run_v5_regtile_2d(const klab::Launch& l) {
  GemmArgs g = gemm_args(l);
  if (empty_output(g)) return;
  const dim3 grid = tile_grid(g, 128, 128, shape_of(l.problem).batch);
  dispatch_layout(l.problem.variant, [&]<bool AK, bool BK>() {
    matmul_v5_regtile_2d<AK, BK, false><<<grid, 256, 0, l.stream>>>(g, false);
  });
  KLAB_CHECK_LAUNCH();
}

// v5's kernel with VEC when the rows are 16-byte aligned, v5 itself otherwise.
void run_v6_vectorized(const klab::Launch& l) {
  GemmArgs g = gemm_args(l);
  if (empty_output(g)) return;
  const dim3 grid = tile_grid(g, 128, 128, shape_of(l.problem).batch);
  const bool vec = operands_aligned(g, 4, 16);
  dispatch_layout(l.problem.variant, [&]<bool AK, bool BK>() {
    if (vec) matmul_v5_regtile_2d<AK, BK, true><<<grid, 256, 0, l.stream>>>(g, c_vec_ok(g));
    else matmul_v5_regtile_2d<AK, BK, false><<<grid, 256, 0, l.stream>>>(g, false);
  });
  KLAB_CHECK_LAUNCH();
}

template <class Cfg>
void launch_warptile(const GemmArgs& g, const std::string& variant, int batch, cudaStream_t s) {
  if (batch == 0) return;  // an empty batch: nothing to write, and a grid with z = 0 is illegal
  const dim3 grid = tile_grid(g, Cfg::BM, Cfg::BN, batch);
  const bool vec = operands_aligned(g, 4, 16), cv = c_vec_ok(g);
  dispatch_layout(variant, [&]<bool AK, bool BK>() {
    auto launch = [&]<bool VEC>() {
      auto kernel = matmul_v7_warptiling<Cfg, AK, BK, VEC>;
      klab::allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Cfg::SMEM_BYTES);  // above 48 KB needs the opt-in
      kernel<<<grid, Cfg::NT, Cfg::SMEM_BYTES, s>>>(g, cv);
    };
    if (vec) launch.template operator()<true>();
    else launch.template operator()<false>();
  });
  KLAB_CHECK_LAUNCH();
}

// For ops matmul and matmul_batched (the batch is blockIdx.z).
void run_v7_warptiling(const klab::Launch& l) {
  GemmArgs g = gemm_args(l);
  if (empty_output(g)) return;
  launch_warptile<CfgV7>(g, l.problem.variant, shape_of(l.problem).batch, l.stream);
}

using WarptileLaunch = void (*)(const GemmArgs&, const std::string&, int, cudaStream_t);
constexpr WarptileLaunch kV8Candidates[] = {
    launch_warptile<Cfg128x128>,   launch_warptile<Cfg128x64>,    launch_warptile<Cfg64x128>,
    launch_warptile<Cfg64x64>,     launch_warptile<Cfg128x128k8>, launch_warptile<Cfg128x256k8>,
    launch_warptile<Cfg256x128k8>, launch_warptile<Cfg128x256>,   launch_warptile<Cfg256x128>,
    launch_warptile<Cfg128x128w64>, launch_warptile<Cfg128x128x2>,
};
const std::vector<std::string> kV8Names = {"128x128x16", "128x64x16",  "64x128x16",  "64x64x16",
                                           "128x128x8",  "128x256x8",  "256x128x8",  "128x256x16",
                                           "256x128x16", "128x128x16/4w", "128x128x16/2blk"};

// What v8 times for a problem, as Impl::candidates reports it: every configuration, for
// every shape, dtype and layout (each one handles any shape), so no filter.
std::vector<std::string> v8_candidates(const klab::Problem&) { return kV8Names; }

// For ops matmul and matmul_batched (the batch is blockIdx.z and part of the cache key).
void run_v8_autotuned(const klab::Launch& l) {
  GemmArgs g = gemm_args(l);
  if (empty_output(g)) return;
  const int batch = shape_of(l.problem).batch;
  const std::string key = "simt|" + l.problem.label() + "|" + std::to_string(batch);
  static_assert(sizeof(kV8Candidates) / sizeof(kV8Candidates[0]) == 11, "kV8Names labels every candidate");
  const int best = klab::autotune(l, key, v8_candidates(l.problem), 0,
                                  [&](int c) { kV8Candidates[c](g, l.problem.variant, batch, l.stream); });
  kV8Candidates[best](g, l.problem.variant, batch, l.stream);
}

}  // namespace

// fp32 partials of split-K (matmul_splitk.cu): v7's kernel, blockIdx.z over the K slices.
void launch_warptile_f32(const GemmArgs& g, const std::string& variant, cudaStream_t s) {
  if (empty_output(g)) return;
  launch_warptile<CfgV7>(g, variant, 1, s);
}

namespace {

// ======================================================================================
// Registration
// ======================================================================================
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v4_regtile_1d",
                                   .summary = "64x64 tiles, 8 outputs per thread along M",
                                   .kind = klab::ImplKind::cuda, .supports = f32_only,
                                   .run = run_v4_regtile_1d}));
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v5_regtile_2d",
                                   .summary = "128x128 tiles, an 8x8 outer product per thread",
                                   .kind = klab::ImplKind::cuda, .supports = f32_only,
                                   .run = run_v5_regtile_2d}));
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v6_vectorized",
                                   .summary = "v5 with 16-byte global and shared loads",
                                   .kind = klab::ImplKind::cuda, .supports = f32_only,
                                   .run = run_v6_vectorized,
                                   .kernels = {"matmul_v5_regtile_2d"}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v7_warptiling",
                                   .summary = "warp tiles, conflict-free float4 lanes, double buffer",
                                   .kind = klab::ImplKind::cuda, .supports = f32_only,
                                   .run = run_v7_warptiling}));
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v8_autotuned",
                                   .summary = "v7 in 11 tile configurations, the fastest chosen per shape and cached",
                                   .kind = klab::ImplKind::cuda, .supports = f32_only,
                                   .run = run_v8_autotuned, .candidates = v8_candidates,
                                   .kernels = {"matmul_v7_warptiling"}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul_batched", .name = "v7_warptiling",
                                   .summary = "v7 with blockIdx.z over the batch",
                                   .kind = klab::ImplKind::cuda, .supports = f32_only,
                                   .run = run_v7_warptiling}));
KLAB_REGISTER(klab::register_impl({.op = "matmul_batched", .name = "v8_autotuned",
                                   .summary = "v8 with blockIdx.z over the batch",
                                   .kind = klab::ImplKind::cuda, .supports = f32_only,
                                   .run = run_v8_autotuned, .candidates = v8_candidates,
                                   .kernels = {"matmul_v7_warptiling"}}));

}  // namespace
}  // namespace lesson05
