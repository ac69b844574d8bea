// Lesson 05 — matmul on the tensor cores through PTX: bf16 inputs, fp32 accumulation, bf16
// output. One kernel (matmul_mma_sync), configured by MmaConfig, serves every version here
// and split-K's bf16 partials (launch_mma_bf16, matmul_splitk.cu: v12_splitk). The WMMA
// version v9_wmma is matmul_wmma.cu.
//
//   v10_mma_sync       the PTX under WMMA: ldmatrix (with .trans for M/N-contiguous
//                      operands) feeds mma.sync.m16n8k16 directly from registers we
//                      control; tiles arrive by cp.async (16-byte copies that bypass the
//                      registers) into a two-stage ring; shared rows are plain, so an
//                      ldmatrix of 8 rows 64 or 256 bytes apart hits the same banks
//   v11_mma_pipelined  four cp.async stages in flight (three tiles loading while one is
//                      multiplied), the XOR swizzle that spreads every ldmatrix over all
//                      32 banks, and a grouped tile order so consecutive blocks share
//                      their A rows in L2; for ops matmul and matmul_batched
//   v13_mma_autotuned  v11's pipeline with 64x64 warp tiles (per k16 step a warp issues 8
//                      ldmatrix for 32 mma; v11: 6 for 16) in four block configurations
//                      (128x256 with 8 warps, 128x128 with 4 warps and two blocks per SM;
//                      BK 64 or 32; 3 or 4 stages), the fastest chosen per shape and cached;
//                      its kernels either copy interior tiles without bounds arithmetic
//                      or double-buffer the fragments (ldmatrix of step s+1 during the mma
//                      of step s, and across the barrier); for ops matmul and matmul_batched
//
// Any M, N, K and all three layouts: tiles are zero-filled past M, N and K (cp.async with
// a source size below 16 fills the rest with zeros), stores are guarded. cp.async needs
// 16-byte aligned sources: when a row length is not a multiple of 8 elements the same
// kernel is instantiated with plain loads (ASYNC = false) — correct, slower. The cp.async
// wrappers are klab/device/cp_async.cuh, ldmatrix's klab/device/wgmma.cuh, mma.sync's
// klab/device/mma.cuh (klab::mma_m16n8k16, which lesson 09's attention shares).
//
// The Hopper versions (TMA + wgmma, warp specialisation, persistent) go in a file of their
// own that registers v14_... impls for the same ops, guarded with __CUDA_ARCH__ >= 900.
//
//   klab test 05 --op matmul,matmul_batched --dtype bf16
//   klab bench 05 --op matmul --dtype bf16 --variant nt --shape 4096x4096x4096
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "klab/device.hpp"
#include "klab/device/cp_async.cuh"
#include "klab/device/mma.cuh"
#include "klab/device/wgmma.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "matmul.cuh"

namespace lesson05 {
namespace {

using bf16 = __nv_bfloat16;
using std::int64_t;
using std::uint32_t;

// ---- shared-memory tile addressing ----------------------------------------------------
// A tile keeps the operand's global layout: ROWS rows of COLS contiguous bf16 (COLS = BK
// for a K-contiguous operand, BM or BN otherwise), addressed in 16-byte chunks of 8.
// Swizzled: chunk c of row r lives at chunk c ^ key(r). ldmatrix reads one chunk from each
// of 8 consecutive rows; with 64-byte rows (BK = 32) rows r and r+2 share banks, with
// 256-byte rows all 8 do. The key makes the 8 chunks land in 8 different 16-byte bank
// groups:  64-byte rows: key = (r/2) % 4;  128 or 256-byte rows: key = r % 8.
//   equivalent to, for 256-byte rows:  phys_chunk = chunk ^ (row & 7)
template <int COLS, bool SWZ>
__device__ __forceinline__ uint32_t tile_off(int r, int chunk) {  // bytes from the tile start
  constexpr int RB = COLS * 2, CH = COLS / 8;
  static_assert(COLS % 8 == 0, "16-byte chunks");
  if constexpr (!SWZ) {
    return static_cast<uint32_t>(r * RB + chunk * 16);
  } else {
    constexpr int LR = RB >= 128 ? 1 : 128 / RB;  // rows per 128-byte line
    constexpr int KEYS = (8 / LR) < CH ? (8 / LR) : CH;
    return static_cast<uint32_t>(r * RB + ((chunk ^ ((r / LR) % KEYS)) * 16));
  }
}

// Copies rows [r0, r0+ROWS) x columns [c0, c0+COLS) of a row-major operand (pitch ld) into
// a tile, zero outside [0, r_lim) x [0, c_lim), with plain loads: the path for operands
// whose rows are not 16-byte aligned (cp.async needs aligned sources; aligned operands go
// through AsyncTileCopy below).
template <int ROWS, int COLS, int NT, bool SWZ>
__device__ __forceinline__ void load_tile(const bf16* g_src, int64_t ld, int r0, int c0, int r_lim, int c_lim,
                                          char* s_tile, int tid) {
  constexpr int CH = COLS / 8, CHUNKS = ROWS * CH;
  static_assert(CHUNKS % NT == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int i = 0; i < CHUNKS / NT; ++i) {
    const int c = tid + i * NT, r = c / CH, ch = c % CH;
    const int gr = r0 + r, gc = c0 + ch * 8;
    const bool row_in = gr < r_lim;
    const bf16* g_row = g_src + static_cast<int64_t>(row_in ? gr : 0) * ld + gc;
    __align__(16) bf16 r_v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) r_v[j] = (row_in && gc + j < c_lim) ? g_row[j] : __float2bfloat16_rn(0.f);
    *reinterpret_cast<uint4*>(s_tile + tile_off<COLS, SWZ>(r, ch)) = *reinterpret_cast<const uint4*>(r_v);
  }
}

// The cp.async tile copy, with the per-chunk arithmetic done once per thread. Computing
// every chunk's row, column, 64-bit address, swizzled offset and bounds on every K tile
// (as load_tile does) costs ~20 instructions per 16-byte copy, more than the tensor-core work
// they feed at BK = 32 (ncu on v11: bound by instruction issue, not by the tensor cores or
// memory; the README has the counts). Here a thread's
// chunks of one tile are RSTEP rows apart in the same chunk column, so
//   - the shared offsets are its first chunk's plus i·RSTEP rows (the swizzle key, a
//     function of row mod 8, is the same for all: RSTEP is a multiple of 8),
//   - the global addresses are its first chunk's plus i·RSTEP rows of the operand, and the
//     next K tile is one fixed step further,
//   - the bounds of the dimension that does not move with K (M or N) never change: they are
//     a byte count per chunk (16, a partial chunk at the edge, or 0), computed once.
// Only a tile that crosses the end of K checks K, chunk by chunk.
// K_COLS: the tile's columns run along K (an operand stored K-contiguous); otherwise its
// rows do. X is the operand's other dimension (M for A, N for B), x0 the block's origin.
template <int ROWS, int COLS, int NT, bool SWZ, bool K_COLS>
struct AsyncTileCopy {
  static constexpr int CH = COLS / 8, RSTEP = NT / CH, PER = ROWS / RSTEP;
  static_assert(NT % CH == 0 && ROWS % RSTEP == 0, "every thread copies whole, evenly spaced chunks");
  static_assert(!SWZ || RSTEP % 8 == 0, "one swizzle key for all of a thread's chunks");
  static constexpr int KT = K_COLS ? COLS : ROWS;          // the tile's extent along K

  const bf16* g_src;     // first chunk, K tile 0
  int64_t row_pitch;     // elements between a thread's chunks (RSTEP rows of the operand)
  int64_t k_step;        // elements from one K tile to the next
  uint32_t dst;          // first chunk's byte offset in a tile
  int r, c;              // first chunk's tile row and first column (elements)
  int fixed_bytes[K_COLS ? PER : 1];  // bytes in bounds along X: per chunk, or one for all

  __device__ __forceinline__ AsyncTileCopy(const bf16* g_op, int64_t ld, int x0, int X, int tid) {
    r = tid / CH;
    const int ch = tid % CH;
    c = ch * 8;
    dst = tile_off<COLS, SWZ>(r, ch);
    row_pitch = RSTEP * ld;
    if constexpr (K_COLS) {            // rows along X: x0 + r + i·RSTEP; columns along K
      g_src = g_op + static_cast<int64_t>(x0 + r) * ld + c;
      k_step = KT;
#pragma unroll
      for (int i = 0; i < PER; ++i) fixed_bytes[i] = x0 + r + i * RSTEP < X ? 16 : 0;
    } else {                           // rows along K; columns along X: x0 + c .. + 7
      g_src = g_op + static_cast<int64_t>(r) * ld + x0 + c;
      k_step = static_cast<int64_t>(KT) * ld;
      fixed_bytes[0] = 2 * max(0, min(8, X - (x0 + c)));
    }
  }

  // Copies K tile kt of a block whose tile lies inside the operand and whose K tile is
  // whole: no bounds, no byte counts, one pointer and fixed strides.
  __device__ __forceinline__ void load_interior(int kt, uint32_t s_tile) const {
    const bf16* g_p = g_src + kt * k_step;
#pragma unroll
    for (int i = 0; i < PER; ++i) klab::cp_async_16_full(s_tile + dst + i * RSTEP * COLS * 2, g_p + i * row_pitch);
  }

  // Copies K tile kt into `s_tile` (a shared address); k_len bounds the tile's K extent.
  // An empty chunk (0 bytes) points its source at g_op, the operand's start: a valid address.
  __device__ __forceinline__ void load(int kt, int k_len, uint32_t s_tile, const bf16* g_op) const {
    const bf16* g_p = g_src + kt * k_step;
    const int k0 = kt * KT;
    const bool k_whole = k0 + KT <= k_len;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      int bytes = fixed_bytes[K_COLS ? i : 0];
      if (!k_whole) {
        if constexpr (K_COLS) bytes = bytes ? 2 * max(0, min(8, k_len - (k0 + c))) : 0;
        else bytes = k0 + r + i * RSTEP < k_len ? bytes : 0;
      }
      const bf16* g_q = g_p + i * row_pitch;
      klab::cp_async_16(s_tile + dst + i * RSTEP * COLS * 2,
                        bytes ? static_cast<const void*>(g_q) : static_cast<const void*>(g_op), bytes);
    }
  }
};

// The shared addresses of a warp's ldmatrix loads, with the swizzle worked out once per
// thread. ldmatrix.x4 lane l gives the address of row l % 8 of 8x8 matrix l / 8; of the
// two bits of l / 8 one picks the k half of the 16x16 fragment, the other the m (or n)
// half. Every fragment a lane loads has its row at a multiple of 8 plus l % 8, so the
// swizzle key is a function of l % 8 alone:
//   K-contiguous tile (rows m, chunks k): chunk kk/8 + k_half, and as kk/8 is even,
//     (kk/8 + k_half) ^ key = (kk/8) ^ (k_half ^ key): one lane offset per k16 step; the
//     row (16 i further per fragment) is added as a constant
//   M-contiguous tile (rows k, chunks m): chunk w0/8 + 2i + m_half, the same at every k16
//     step: one lane offset per fragment i; the k row is added as a constant
// i counts 16-wide fragments (m16 tiles of A, pairs of n8 tiles of B, NF of them). This
// is what tile_off computes, without the swizzle arithmetic in the inner loop.
template <int COLS, bool SWZ, bool KMAJ, int BKT, int NF>
struct FragAddr {
  static constexpr int RB = COLS * 2, CH = COLS / 8, KS = BKT / 16;
  static constexpr int LR = RB >= 128 ? 1 : 128 / RB;
  static constexpr int KEYS = (8 / LR) < CH ? (8 / LR) : CH;
  uint32_t base;
  uint32_t off[KMAJ ? KS : NF];

  __device__ __forceinline__ FragAddr(int w0, int outer_half, int k_half, int lr) {
    const int key = SWZ ? (lr / LR) % KEYS : 0;   // rows are 8-aligned plus lr
    if constexpr (KMAJ) {
      base = static_cast<uint32_t>((w0 + outer_half * 8 + lr) * RB);
#pragma unroll
      for (int s = 0; s < KS; ++s) off[s] = static_cast<uint32_t>(((2 * s) ^ (k_half ^ key)) * 16);
    } else {
      base = static_cast<uint32_t>((k_half * 8 + lr) * RB);
#pragma unroll
      for (int i = 0; i < NF; ++i) off[i] = static_cast<uint32_t>(((w0 / 8 + 2 * i + outer_half) ^ key) * 16);
    }
  }
  // Byte offset in the tile of fragment i at k16 step s.
  __device__ __forceinline__ uint32_t at(int i, int s) const {
    if constexpr (KMAJ) return base + off[s] + static_cast<uint32_t>(i * 16 * RB);
    else return base + off[i] + static_cast<uint32_t>(s * 16 * RB);
  }
};

// ======================================================================================
// v10_mma_sync (STAGES 2, plain rows), v11_mma_pipelined (STAGES 4, swizzled, grouped tile
// order) and v13_mma_autotuned: one kernel, configured by MmaConfig. v10/v11 use a
// 128x128x32 block tile, 8 warps as 2 (M) x 4 (N), warp tile 64x32 = 4 (m16) x 4 (n8) mma
// tiles, 64 fp32 accumulators per thread. v13's configurations use 64x64 warp tiles = 4 x 8
// mma tiles, 128 accumulators per thread.
//
// Fragments (PTX ISA, mma.m16n8k16 .bf16), g = lane / 4, t = lane % 4:
//   A regs a0..a3: (row g, k 2t..2t+1), (row g+8, k 2t..), (row g, k 8+2t..), (row g+8, k 8+2t..)
//   B regs b0, b1: (k 2t..2t+1, col g), (k 8+2t.., col g)
//   C regs c0..c3: (row g, col 2t), (row g, col 2t+1), (row g+8, col 2t), (row g+8, col 2t+1)
// One ldmatrix.x4 gives a whole A fragment (its four 8x8 quarters) or the B fragments of
// two n8 tiles. For an operand stored with K contiguous the 8x8 quarters are read as
// stored; stored M/N-contiguous they are read transposed (.trans): the same registers.
// ======================================================================================
template <int BM_, int BN_, int BK_, int WARPS_M, int WARPS_N, int STAGES_, bool SWZ_, bool GROUPED_,
          int MIN_BLOCKS_, bool FRAG_DB_ = false, bool INTERIOR_ = false>
struct MmaConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, STAGES = STAGES_, MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr bool SWZ = SWZ_, GROUPED = GROUPED_, FRAG_DB = FRAG_DB_, INTERIOR = INTERIOR_;
  static constexpr int NT = WARPS_M * WARPS_N * 32, WARPS_N_ = WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;   // warp tile
  static constexpr int MI = WM / 16, NI = WN / 8;              // mma tiles per warp
  static constexpr int TILE_BYTES_A = BM * BK * 2, TILE_BYTES_B = BN * BK * 2;
  static constexpr int STAGE_BYTES = TILE_BYTES_A + TILE_BYTES_B;
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES;
  static_assert(STAGES >= 2, "the ring needs a stage to compute and one to load");
  static_assert(BM % WARPS_M == 0 && BN % WARPS_N == 0 && NT <= 1024, "warps tile the block; at most 1024 threads");
  static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "whole m16 / n16 (two n8) / k16 steps");
  static_assert(SMEM_BYTES <= 227 * 1024, "over the 227 KB a block may use");
  static_assert(!FRAG_DB || (BK / 16) % 2 == 0, "the fragment buffers alternate: step 0 of every tile uses buffer 0");
};
//                       BM   BN  BK WM WN STG  SWZ    GROUPED MINB
using CfgV10 = MmaConfig<128, 128, 32, 2, 4, 2, false, false, 2>;
using CfgV11 = MmaConfig<128, 128, 32, 2, 4, 4, true, true, 2>;
// v13's candidates: 64x64 warp tiles (32 mma per 8 ldmatrix) in big block tiles, either
// 8 warps and one block per SM or 4 warps and two blocks per SM (one block's barrier waits
// overlap the other's mma), BK 64 (or 32 with a fourth stage); each with the bound-free
// copy for interior tiles (INTERIOR), or with double-buffered fragments (FRAG_DB). Both at
// once need more than 255 registers. 128x128 blocks with fragment double buffering and
// 128x256 or 256x128 with three stages were slower than these four and were dropped (the
// README has the autotuner's times).
//                          BM   BN  BK WM WN STG  SWZ   GROUPED MINB FRAG_DB INTERIOR
using CfgV13a = MmaConfig<128, 256, 64, 2, 4, 4, true, true, 1, true, false>;
using CfgV13b = MmaConfig<128, 256, 64, 2, 4, 4, true, true, 1, false, true>;
using CfgV13c = MmaConfig<128, 128, 64, 2, 2, 3, true, true, 2, false, true>;
using CfgV13d = MmaConfig<128, 128, 32, 2, 2, 4, true, true, 2, false, true>;

template <class Cfg, bool AK, bool BK, bool ASYNC, class TC>
__global__ void __launch_bounds__(Cfg::NT, Cfg::MIN_BLOCKS) matmul_mma_sync(GemmArgs g, bool c_pair) {
#ifndef KLAB_TC_UNSUPPORTED
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BKT = Cfg::BK, NT = Cfg::NT, STAGES = Cfg::STAGES;
  constexpr int MI = Cfg::MI, NI = Cfg::NI;
  constexpr bool SWZ = Cfg::SWZ;
  constexpr int A_ROWS = AK ? BM : BKT, A_COLS = AK ? BKT : BM;  // tile in A's global layout
  constexpr int B_ROWS = BK ? BN : BKT, B_COLS = BK ? BKT : BN;
  extern __shared__ __align__(128) char s_stages[];                  // STAGES x (A tile, B tile)

  const auto z = z_slice<AK, BK, bf16, TC>(g);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  // Tile order: row-major, or grouped (matmul.cuh: grouped_tile) so that consecutive
  // blocks share B tiles in L2.
  int tile_m = blockIdx.y, tile_n = blockIdx.x;
  if constexpr (Cfg::GROUPED) grouped_tile<8>(blockIdx.y * gridDim.x + blockIdx.x, gridDim.y, gridDim.x, tile_m, tile_n);
  const int m0 = tile_m * BM, n0 = tile_n * BN;
  const int wm0 = (warp / Cfg::WARPS_N_) * Cfg::WM, wn0 = (warp % Cfg::WARPS_N_) * Cfg::WN;

  // Aligned operands go through the precomputed cp.async copiers; the others (rows not a
  // multiple of 16 bytes) through the generic loader with plain loads.
  const AsyncTileCopy<A_ROWS, A_COLS, NT, SWZ, AK> copy_a(z.A, g.lda, m0, g.M, tid);
  const AsyncTileCopy<B_ROWS, B_COLS, NT, SWZ, BK> copy_b(z.B, g.ldb, n0, g.N, tid);
  const uint32_t s_base = klab::smem_u32(s_stages);
  // Most blocks lie inside M and N; for them every whole K tile takes the bound-free copy.
  const bool interior = Cfg::INTERIOR && m0 + BM <= g.M && n0 + BN <= g.N;
  auto load_stage = [&](int kt, int stage) {
    if constexpr (ASYNC) {
      const uint32_t s_ta = s_base + stage * Cfg::STAGE_BYTES;
      if (interior && (kt + 1) * BKT <= z.k_len) {
        copy_a.load_interior(kt, s_ta);
        copy_b.load_interior(kt, s_ta + Cfg::TILE_BYTES_A);
      } else {
        copy_a.load(kt, z.k_len, s_ta, z.A);
        copy_b.load(kt, z.k_len, s_ta + Cfg::TILE_BYTES_A, z.B);
      }
    } else {
      char* s_ta = s_stages + stage * Cfg::STAGE_BYTES;
      char* s_tb = s_ta + Cfg::TILE_BYTES_A;
      const int k0 = kt * BKT;
      if (AK) load_tile<A_ROWS, A_COLS, NT, SWZ>(z.A, g.lda, m0, k0, g.M, z.k_len, s_ta, tid);
      else    load_tile<A_ROWS, A_COLS, NT, SWZ>(z.A, g.lda, k0, m0, z.k_len, g.M, s_ta, tid);
      if (BK) load_tile<B_ROWS, B_COLS, NT, SWZ>(z.B, g.ldb, n0, k0, g.N, z.k_len, s_tb, tid);
      else    load_tile<B_ROWS, B_COLS, NT, SWZ>(z.B, g.ldb, k0, n0, z.k_len, g.N, s_tb, tid);
    }
  };

  float r_acc[MI][NI][4] = {};  // (m16 tile, n8 tile, c register)
  const int k_tiles = (z.k_len + BKT - 1) / BKT;

  // Prologue: STAGES-1 tiles in flight. A group is committed even when empty, so that
  // "group kt" always means "tile kt" in the wait below.
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    klab::cp_async_commit();
  }

  const int li = lane / 8, lr = lane % 8;  // which 8x8 matrix this lane addresses, which row
  // A fragment: matrix li is m half li % 2, k half li / 2; B: n8 tile li / 2, k half li % 2.
  const FragAddr<A_COLS, SWZ, AK, BKT, MI> frag_a(wm0, li % 2, li / 2, lr);
  const FragAddr<B_COLS, SWZ, BK, BKT, NI / 2> frag_b(wn0, li / 2, li % 2, lr);
  // One k16 step of fragments from the tile at shared address s_a / s_b.
  auto load_frags = [&](uint32_t s_a, uint32_t s_b, int s, uint32_t (&r_a)[MI][4], uint32_t (&r_b)[NI][2]) {
    // Equivalent to tile_off of (row m + lr, chunk k / 8), or (row k + lr, chunk m / 8)
    // for an M-contiguous tile, with m = wm0 + 16 mi + 8 (li % 2), k = 16 s + 8 (li / 2);
    // for B, n = wn0 + 16 nj + 8 (li / 2), k = 16 s + 8 (li % 2).
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) klab::ldmatrix_x4<!AK>(r_a[mi], s_a + frag_a.at(mi, s));
#pragma unroll
    for (int nj = 0; nj < NI / 2; ++nj) {
      uint32_t r_x4[4];
      klab::ldmatrix_x4<!BK>(r_x4, s_b + frag_b.at(nj, s));
      r_b[2 * nj][0] = r_x4[0], r_b[2 * nj][1] = r_x4[1], r_b[2 * nj + 1][0] = r_x4[2], r_b[2 * nj + 1][1] = r_x4[3];
    }
  };
  auto mma_step = [&](const uint32_t (&r_a)[MI][4], const uint32_t (&r_b)[NI][2]) {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) klab::mma_m16n8k16<bf16>(r_acc[mi][ni], r_a[mi], r_b[ni][0], r_b[ni][1]);
  };
  auto stage_a = [&](int kt) { return s_base + (kt % STAGES) * Cfg::STAGE_BYTES; };
  constexpr int KS = BKT / 16;  // k16 steps per tile
  // In iteration kt: tile kt+STAGES-1 into the stage of tile kt-1 (read before the barrier
  // that opened the iteration), and the group committed even when empty.
  auto copy_next = [&](int kt) {
    const int next = kt + STAGES - 1;
    if (next < k_tiles) load_stage(next, next % STAGES);
    klab::cp_async_commit();
  };

  if constexpr (!Cfg::FRAG_DB) {
    // Where the next tile's copies (into stage kt-1, free since the barrier) are issued.
    // Right after the barrier, the compiler reused their address registers a few
    // instructions later, and the warp waited (long scoreboard) until the queued cp.async
    // had read them: ncu's source-level stall sampling put the largest single share of the
    // 128x128x32 candidate's stalls on that instruction. With BK >= 64 they go after the
    // tile's last ldmatrix, where only mma follow them (faster; half of them one step
    // earlier was no faster). With BK = 32 that spot cost more than it saved (v11 and the
    // 128x128x32 candidate were slower): there they stay first. Times in the README.
    constexpr int COPY_STEP = KS >= 4 ? KS - 1 : -1;  // -1: before the first ldmatrix
    for (int kt = 0; kt < k_tiles; ++kt) {
      klab::cp_async_wait<STAGES - 2>();  // tile kt has landed (at most STAGES-2 newer groups pending)
      __syncthreads();              // ...for every thread's copies; and stage kt-1 is free
      if (COPY_STEP < 0) copy_next(kt);
      const uint32_t s_a = stage_a(kt), s_b = s_a + Cfg::TILE_BYTES_A;
#pragma unroll
      for (int s = 0; s < KS; ++s) {
        uint32_t r_a[MI][4], r_b[NI][2];
        load_frags(s_a, s_b, s, r_a, r_b);
        if (s == COPY_STEP) copy_next(kt);
        mma_step(r_a, r_b);
      }
    }
  } else {
    // Fragments double-buffered: the ldmatrix of step s+1 are in flight during the mma of
    // step s, and the wait and barrier for tile kt+1 come before the last step's mma of
    // tile kt, so the next tile's first fragments load behind that step's arithmetic.
    // Stage kt % STAGES is refilled in iteration kt+1, after every read of it (all before
    // the barrier at the end of iteration kt).
    uint32_t r_a[2][MI][4], r_b[2][NI][2];
    if (k_tiles > 0) {
      klab::cp_async_wait<STAGES - 2>();
      __syncthreads();
      load_frags(stage_a(0), stage_a(0) + Cfg::TILE_BYTES_A, 0, r_a[0], r_b[0]);
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
      copy_next(kt);
      const uint32_t s_a = stage_a(kt), s_b = s_a + Cfg::TILE_BYTES_A;
#pragma unroll
      for (int s = 0; s < KS; ++s) {
        if (s + 1 < KS) {
          load_frags(s_a, s_b, s + 1, r_a[(s + 1) % 2], r_b[(s + 1) % 2]);
        } else if (kt + 1 < k_tiles) {
          klab::cp_async_wait<STAGES - 2>();  // tile kt+1 has landed
          __syncthreads();
          const uint32_t s_na = stage_a(kt + 1);
          load_frags(s_na, s_na + Cfg::TILE_BYTES_A, 0, r_a[(s + 1) % 2], r_b[(s + 1) % 2]);
        }
        mma_step(r_a[s % 2], r_b[s % 2]);
      }
    }
  }
  klab::cp_async_wait<0>();  // no copy may still target shared memory when the block exits

  const int gq = lane / 4, tq = lane % 4;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m0 + wm0 + mi * 16 + gq + h * 8;
      if (m >= g.M) continue;
      const int64_t row = static_cast<int64_t>(m) * g.ldc;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int n = n0 + wn0 + ni * 8 + tq * 2;
        store_pair<TC>(z.C, row, n, g.N, r_acc[mi][ni][2 * h], r_acc[mi][ni][2 * h + 1], c_pair);
      }
    }
#endif
}

// ======================================================================================
// Launchers
// ======================================================================================
template <class Cfg, bool AK, bool BK, bool ASYNC, class TC>
void launch_mma_inst(const GemmArgs& g, int batch, cudaStream_t s) {
  if (batch == 0) return;  // an empty batch: nothing to write, and a grid with z = 0 is illegal
  auto kernel = matmul_mma_sync<Cfg, AK, BK, ASYNC, TC>;
  klab::allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Cfg::SMEM_BYTES);  // above 48 KB needs the opt-in
  kernel<<<tile_grid(g, Cfg::BM, Cfg::BN, batch), Cfg::NT, Cfg::SMEM_BYTES, s>>>(g, pair_ok(g, sizeof(TC)));
  KLAB_CHECK_LAUNCH();
}

template <class Cfg, class TC>
void launch_mma(const GemmArgs& g, const std::string& variant, int batch, cudaStream_t s) {
  if (empty_output(g)) return;
  const bool async = operands_aligned(g, 2, 16);
  dispatch_layout(variant, [&]<bool AK, bool BK>() {
    if (async) launch_mma_inst<Cfg, AK, BK, true, TC>(g, batch, s);
    else launch_mma_inst<Cfg, AK, BK, false, TC>(g, batch, s);
  });
}

// One configuration on a launch of op matmul or matmul_batched, bf16 out.
template <class Cfg>
void run_mma_config(const klab::Launch& l) {
  launch_mma<Cfg, bf16>(gemm_args(l), l.problem.variant, shape_of(l.problem).batch, l.stream);
}

void run_v10_mma_sync(const klab::Launch& l) { run_mma_config<CfgV10>(l); }

// For ops matmul and matmul_batched.
void run_v11_mma_pipelined(const klab::Launch& l) { run_mma_config<CfgV11>(l); }

using MmaLaunch = void (*)(const klab::Launch&);
constexpr MmaLaunch kV13Candidates[] = {run_mma_config<CfgV13a>, run_mma_config<CfgV13b>, run_mma_config<CfgV13c>,
                                        run_mma_config<CfgV13d>};
const std::vector<std::string> kV13Names = {"128x256x64/8w/4st/fragdb", "128x256x64/8w/4st/interior",
                                            "128x128x64/4w/3st/2blk/interior", "128x128x32/4w/4st/2blk/interior"};

// What v13 times for a problem, as Impl::candidates reports it: every configuration, for
// every shape and layout (each one handles any shape), so no filter.
std::vector<std::string> v13_candidates(const klab::Problem&) { return kV13Names; }

// For ops matmul and matmul_batched (the batch is part of the cache key).
void run_v13_mma_autotuned(const klab::Launch& l) {
  static_assert(sizeof(kV13Candidates) / sizeof(kV13Candidates[0]) == 4, "kV13Names labels every candidate");
  const std::string key = "mma|" + l.problem.label() + "|" + std::to_string(shape_of(l.problem).batch);
  const int best = klab::autotune(l, key, v13_candidates(l.problem), 0, [&](int c) { kV13Candidates[c](l); });
  kV13Candidates[best](l);
}

}  // namespace

// v20_autotuned's mma.sync candidates (matmul_autotuned.cu): v13's configurations by index.
std::vector<std::string> v13_config_names() { return kV13Names; }
void run_v13_config(const klab::Launch& l, int c) { kV13Candidates[c](l); }

// Used by split-K (v12_splitk, fp32 partials) — v11's kernel with blockIdx.z over the K slices.
void launch_mma_bf16(const GemmArgs& g, const std::string& variant, bool out_f32, cudaStream_t s) {
  if (out_f32) launch_mma<CfgV11, float>(g, variant, 1, s);
  else launch_mma<CfgV11, bf16>(g, variant, 1, s);
}

namespace {

// ======================================================================================
// Registration
// ======================================================================================
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v10_mma_sync",
                                   .summary = "ldmatrix + mma.sync m16n8k16, cp.async double buffer",
                                   .kind = klab::ImplKind::cuda, .supports = bf16_tc, .run = run_v10_mma_sync,
                                   .kernels = {"matmul_mma_sync"}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v11_mma_pipelined",
                                   .summary = "4 cp.async stages, swizzled shared memory, grouped tile order",
                                   .kind = klab::ImplKind::cuda, .supports = bf16_tc,
                                   .run = run_v11_mma_pipelined,
                                   .kernels = {"matmul_mma_sync"}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v13_mma_autotuned",
                                   .summary = "64x64 warp tiles in 4 block configurations, the fastest chosen per shape",
                                   .kind = klab::ImplKind::cuda, .supports = bf16_tc,
                                   .run = run_v13_mma_autotuned, .candidates = v13_candidates,
                                   .kernels = {"matmul_mma_sync"}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul_batched", .name = "v11_mma_pipelined",
                                   .summary = "v11 with blockIdx.z over the batch",
                                   .kind = klab::ImplKind::cuda, .supports = bf16_tc,
                                   .run = run_v11_mma_pipelined,
                                   .kernels = {"matmul_mma_sync"}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul_batched", .name = "v13_mma_autotuned",
                                   .summary = "v13 with blockIdx.z over the batch",
                                   .kind = klab::ImplKind::cuda, .supports = bf16_tc,
                                   .run = run_v13_mma_autotuned, .candidates = v13_candidates,
                                   .kernels = {"matmul_mma_sync"}}));

}  // namespace
}  // namespace lesson05
