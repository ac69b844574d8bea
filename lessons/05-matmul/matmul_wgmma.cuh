// lessons/05-matmul/matmul_wgmma.cuh — the Hopper matmul kernel of lesson 05 (TMA, wgmma,
// mbarriers: matmul_hopper.cu tells its story and registers v14-v19), as a template that
// other lessons instantiate with an epilogue of their own.
//
// An epilogue is a type with a member
//   template <int ACC> __device__ void apply(float (&r_acc)[ACC], int row, int col) const;
// called by each MMA thread on its fp32 accumulators once a tile's main loop is done and
// before they are stored: r_acc[4 * j + 2 * h + e] is the output (row + 8 * h, col + 8 * j + e)
// of C (wgmma.cuh gives the fragment layout), rows and columns possibly past M and N (they
// are never stored). NoEpilogue, lesson 05's, changes nothing. Lesson 06 fuses a bias and
// an activation here (its linear_bias_act op).
//
// An epilogue may also declare `static constexpr int kSmemBytes` (per MMA warpgroup) and
//   __device__ void load_tile(unsigned char* s_epi, int n0, int t) const;
//   template <int ACC> __device__ void apply(float (&r_acc)[ACC], int row, int col,
//                                            const unsigned char* s_epi) const;
// load_tile runs on each thread t (0..127) of an MMA warpgroup as the tile starts and may
// issue cp.async copies (or plain shared stores) into its kSmemBytes at s_epi (a bias row,
// say); they land while the main loop runs, and apply() reads them after a warpgroup barrier. The copies never hold a
// register through the main loop, and apply() never waits on global memory. An epilogue
// that needs per-row values too (lesson 08's layernorm statistics) declares
// `static constexpr bool kTileRows = true`; its load_tile then takes the first row of the
// warpgroup's 64 as well: load_tile(s_epi, m0, n0, t).
//
// An epilogue may also read a source tile: a bf16 matrix of C's shape and row pitch (lesson
// 06's GELU backward reads the forward's pre-activation), declared by
// `static constexpr bool kSourceTile = true` and a member `const void* source`. From the
// middle k-step of each tile's main loop (the previous tile's TMA store has read the staging
// area by then) the kernel copies the warpgroup's 64 x BN block of it by TMA into v19's C
// staging area, which this tile's own store overwrites afterwards; the copy lands while the
// MMAs run, in no register. apply() then takes a SourceTile as its last argument:
//   template <int ACC> __device__ void apply(float (&r_acc)[ACC], int row, int col,
//                                            unsigned char* s_epi, const SourceTile& src) const;
// and src.load(jn, v) reads the block with ldmatrix in the accumulators' layout: v[i] holds
// the bf16 pair of r_acc[8 jn + 2i] and r_acc[8 jn + 2i + 1].
//
// An epilogue may halve the output's width, `static constexpr int kOutDiv = 2` (lesson 06's
// SwiGLU pairs a gate column block with an up column block): apply() then leaves the output
// tile, BN / 2 wide, in the first ACC / 2 accumulators in the same layout, and the kernel
// stores that by TMA at column n0 / 2 of C, whose width is N / 2.
//
// Everything here is in an anonymous namespace inside lesson05: each file that includes it
// compiles its own instances, so two lessons never share a kernel symbol.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "klab/device.hpp"
#include "klab/device/cp_async.cuh"
#include "klab/device/mbarrier.cuh"
#include "klab/device/tma.cuh"
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

// ======================================================================================
// Configuration
// ======================================================================================
// BM x BN block tile, K in steps of BK = 64 (one 128-byte swizzle row of bf16), STAGES
// shared-memory stages. BM / 64 MMA warpgroups, each 64 x BN. WS: one more warpgroup that
// only copies. PERSISTENT: one block per SM looping over tiles.
// C_ROUNDS > 0: the epilogue stages the bf16 tile in shared memory (stmatrix) and one
// thread per warpgroup stores it with TMA, in C_ROUNDS rounds of BN / C_ROUNDS columns
// through a staging area that size (2 rounds: half the room, one more stage).
template <int BN_, int STAGES_, bool WS_, bool PERSISTENT_, int CLUSTER_ = 1, int C_ROUNDS_ = 0>
struct WgCfg {
  static constexpr int BM = 128, BN = BN_, BK = 64, STAGES = STAGES_, C_ROUNDS = C_ROUNDS_;
  static constexpr bool WS = WS_, PERSISTENT = PERSISTENT_, TMA_STORE = C_ROUNDS > 0, PINGPONG = false;
  static constexpr int CLUSTER = CLUSTER_;  // CTAs side by side in M sharing each B tile
  static constexpr int CONSUMERS = BM / 64;                      // MMA warpgroups
  static constexpr int READERS = CONSUMERS;                      // MMA warpgroups reading a stage
  static constexpr int NT = (CONSUMERS + (WS ? 1 : 0)) * 128;
  static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int C_BYTES = TMA_STORE ? BM * BN * 2 / C_ROUNDS : 0;  // bf16 staging
  // 1024 for aligning the stages to the swizzle period, the C tile, two mbarriers a stage.
  static constexpr int SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + C_BYTES + 2 * STAGES * 8;
  static constexpr int ACC = BN / 2;                             // fp32 accumulators per thread
  static_assert(BN == 128 || BN == 256, "wgmma tiles here are 64x128 or 64x256 per warpgroup");
  static_assert(SMEM_BYTES <= 227 * 1024, "over the 227 KB a block may have");
  static_assert(!PERSISTENT || WS, "the persistent kernel is the warp-specialized one");
  static_assert(CLUSTER == 1 || (CLUSTER == 2 && PERSISTENT), "clusters of 2, in the persistent kernel");
};
//                  BN STAGES WS     PERSISTENT CLUSTER
using CfgV14 = WgCfg<256, 3, false, false>;
using CfgV15 = WgCfg<256, 4, true, false>;
using CfgV16 = WgCfg<256, 4, true, true>;
using CfgV17 = WgCfg<128, 6, true, false>;
using CfgV18 = WgCfg<256, 4, true, true, 2>;
using CfgV19 = WgCfg<256, 3, true, true, 2, 1>;  // 3 stages: the C tile takes the fourth's room
// A v20 candidate: four stages, the C tile staged in two rounds of 128 columns.
using CfgV19Half = WgCfg<256, 4, true, true, 2, 2>;

// Ping-pong (v21): the block's tiles are 64 x BN, and its two MMA warpgroups take them in
// turn, each a whole tile: while one runs its main loop on the tensor cores, the other applies
// its epilogue and stores. A named-barrier hand-off orders their main loops, so the tensor
// cores serve one warpgroup at a time and the stages are read in the order they were
// filled. Persistent, a copy warpgroup, clusters of CLUSTER in M sharing B, the TMA store
// (each warpgroup its own 64 x BN staging area).
template <int BN_, int STAGES_, int CLUSTER_>
struct WgPingPongCfg {
  static constexpr int BM = 64, BN = BN_, BK = 64, STAGES = STAGES_, C_ROUNDS = 1;
  static constexpr bool WS = true, PERSISTENT = true, TMA_STORE = true, PINGPONG = true;
  static constexpr int CLUSTER = CLUSTER_;
  static constexpr int CONSUMERS = 2, READERS = 1;
  static constexpr int NT = (CONSUMERS + 1) * 128;
  static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int C_BYTES = CONSUMERS * 64 * BN * 2;
  static constexpr int SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + C_BYTES + 2 * STAGES * 8;
  static constexpr int ACC = BN / 2;
  static_assert(BN == 128 || BN == 256, "wgmma tiles here are 64x128 or 64x256 per warpgroup");
  static_assert(SMEM_BYTES <= 227 * 1024, "over the 227 KB a block may have");
  static_assert(CLUSTER == 1 || CLUSTER == 2 || CLUSTER == 4, "clusters of 1, 2 or 4");
};
//                           BN STAGES CLUSTER
using CfgV21 = WgPingPongCfg<256, 4, 2>;
// A v20 candidate: clusters of four, so B's L2 reads per output are v19's again.
using CfgV21Cluster4 = WgPingPongCfg<256, 4, 4>;

// The instances of matmul_wgmma a configuration compiles to, as Impl::kernels names them
// (`klab inspect 05 --impl v14_wgmma_tma` then shows v14's kernels only).
template <class Cfg>
std::string wgmma_kernel() {
  if constexpr (Cfg::PINGPONG)
    return "matmul_wgmma@WgPingPongCfg<" + std::to_string(Cfg::BN) + ", " + std::to_string(Cfg::STAGES) + ", " +
           std::to_string(Cfg::CLUSTER) + ">";
  auto b = [](bool v) { return v ? std::string("true") : std::string("false"); };
  return "matmul_wgmma@WgCfg<" + std::to_string(Cfg::BN) + ", " + std::to_string(Cfg::STAGES) + ", " + b(Cfg::WS) +
         ", " + b(Cfg::PERSISTENT) + ", " + std::to_string(Cfg::CLUSTER) + ", " + std::to_string(Cfg::C_ROUNDS) + ">";
}

// Lesson 05's epilogue: the accumulators are stored as they are.
struct NoEpilogue {
  template <int ACC>
  __device__ __forceinline__ void apply(float (&)[ACC], int, int) const {}
};

// The shared memory an epilogue asks for, per MMA warpgroup (0: none).
template <class Epi>
constexpr int epi_smem_bytes() {
  if constexpr (requires { Epi::kSmemBytes; }) return Epi::kSmemBytes;
  else return 0;
}

// How many accumulator columns make one output column (kOutDiv; 1: the product itself).
template <class Epi>
constexpr int epi_out_div() {
  if constexpr (requires { Epi::kOutDiv; }) return Epi::kOutDiv;
  else return 1;
}

// Whether an epilogue's load_tile takes the warpgroup's first row (kTileRows).
template <class Epi>
constexpr bool epi_tile_rows() {
  if constexpr (requires { Epi::kTileRows; }) return Epi::kTileRows;
  else return false;
}

// Whether an epilogue reads a source tile (kSourceTile).
template <class Epi>
constexpr bool epi_has_source() {
  if constexpr (requires { Epi::kSourceTile; }) return Epi::kSourceTile;
  else return false;
}

// Register split of the warp-specialized kernels: 128 x 40 + 256 x 232 <= 64K registers.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;

// Named barriers: 1 + w, one MMA warpgroup's 128 threads (the staging area, the epilogue's
// shared memory); kTurnBarrier + w, the ping-pong hand-off to warpgroup w (256 threads). An
// epilogue may use 3 to 5 for its own (lesson 06's bias gradient does).
constexpr int kTurnBarrier = 6;

// ======================================================================================
// The tile a block works on
// ======================================================================================
struct Tile {
  int m0, n0;      // first row and column of the output tile
  int z, batch;    // z-slice (batch x split) and its batch entry
  int k0, k_tiles; // first k of the slice, and its number of BK-deep steps
};

// Work unit t of units_m·tiles_n·Z: z-slices one after another, grouped order inside each.
// A unit is CLUSTER tiles stacked in M (one per CTA of the cluster, `rank` picks which):
// they share the B tile. A tile past M (the last unit of an odd count) computes zeros and
// stores nothing, but still copies its share of B for the other CTA.
template <class Cfg>
__device__ __forceinline__ Tile tile_at(int t, const GemmArgs& g, int units_m, int tiles_n, int rank) {
  Tile tl;
  const int per_z = units_m * tiles_n;
  tl.z = t / per_z;
  int tm, tn;
  grouped_tile<8>(t - tl.z * per_z, units_m, tiles_n, tm, tn);
  tl.m0 = (tm * Cfg::CLUSTER + rank) * Cfg::BM;
  tl.n0 = tn * Cfg::BN;
  tl.batch = tl.z / g.splits;
  tl.k0 = (tl.z - tl.batch * g.splits) * g.k_chunk;
  const int k_len = min(g.K - tl.k0, g.k_chunk);
  tl.k_tiles = (k_len + Cfg::BK - 1) / Cfg::BK;
  return tl;
}

// ======================================================================================
// The copies of one stage
// ======================================================================================
// A K-major (AK): one box of 64 k x BM rows. A M-major: BM/64 boxes of 64 m x 64 k rows,
// 8 KB apart (the LBO of its descriptor). B likewise with N.
// With a cluster of CLUSTER CTAs, CTA `rank` copies its share of the B tile (BN / CLUSTER rows
// of a K-major box, or that many columns of 64-wide boxes) to all of them at once (multicast).
template <class Cfg, bool AK, bool BK>
__device__ __forceinline__ void load_stage(const CUtensorMap* tm_a, const CUtensorMap* tm_b, uint32_t s_a,
                                           uint32_t s_full, const Tile& tl, int k, int rank) {
  const uint32_t s_b = s_a + Cfg::A_BYTES;
  // The full box bytes count, zero-filled ones included.
  klab::mbar_arrive_expect_tx(s_full, Cfg::STAGE_BYTES);
  if constexpr (AK) {
    klab::tma_load_3d(s_a, tm_a, s_full, k, tl.m0, tl.batch);
  } else {
#pragma unroll
    for (int i = 0; i < Cfg::BM / 64; ++i) klab::tma_load_3d(s_a + i * 8192, tm_a, s_full, tl.m0 + 64 * i, k, tl.batch);
  }
  if constexpr (Cfg::CLUSTER == 1) {
    if constexpr (BK) {
      klab::tma_load_3d(s_b, tm_b, s_full, k, tl.n0, tl.batch);
    } else {
#pragma unroll
      for (int i = 0; i < Cfg::BN / 64; ++i)
        klab::tma_load_3d(s_b + i * 8192, tm_b, s_full, tl.n0 + 64 * i, k, tl.batch);
    }
  } else {
    constexpr int SLICE = Cfg::BN / Cfg::CLUSTER;  // B rows (K-major) or columns (N-major) this CTA copies
    constexpr std::uint16_t ALL = (1u << Cfg::CLUSTER) - 1;
    if constexpr (BK) {  // rows of 128 bytes: a share of the rows is that share of the bytes
      klab::tma_load_3d_multicast(s_b + rank * SLICE * 128, tm_b, s_full, k, tl.n0 + rank * SLICE, tl.batch, ALL);
    } else {
      static_assert(SLICE % 64 == 0, "an N-major B is copied in whole 64-column boxes");
#pragma unroll
      for (int i = rank * SLICE / 64; i < (rank + 1) * SLICE / 64; ++i)
        klab::tma_load_3d_multicast(s_b + i * 8192, tm_b, s_full, tl.n0 + 64 * i, k, tl.batch, ALL);
    }
  }
}

// ======================================================================================
// The TMA-store epilogue (v19)
// ======================================================================================
// The staging address of this lane's row for the 16-column step at column col0 (a multiple of
// 16) of a 64 x COLS area: 64-column boxes of 8 KB, rows of 128 bytes, the 16-byte chunks of
// row r swizzled by r % 8. Each lane names one row of one 8x8 matrix: matrix lane / 8 is
// (rows + 8 if odd, columns + 8 if >= 2) of the 16 x 16 block of its warp's 16 rows.
__device__ __forceinline__ uint32_t staging_row(uint32_t s_c, int warp_in_wg, int lane, int col0) {
  const int r = warp_in_wg * 16 + (lane % 8) + ((lane / 8) % 2) * 8;  // row within the 64
  const int col = col0 + (lane / 16) * 8;                             // which 8 columns
  const uint32_t chunk = static_cast<uint32_t>((col % 64) / 8) ^ static_cast<uint32_t>(r % 8);
  return s_c + (col / 64) * 8192 + r * 128 + chunk * 16;
}

// An epilogue's view of its source tile in the staging area (see the header).
struct SourceTile {
  uint32_t s_c;
  int warp_in_wg, lane;
  __device__ __forceinline__ void load(int jn, uint32_t (&v)[4]) const {
    klab::ldmatrix_x4(v, staging_row(s_c, warp_in_wg, lane, 16 * jn));
  }
};

// A warpgroup's 64 x BN share of the tile, staged as BN/64 boxes of 64 rows x 64 columns
// in the 128-byte swizzle (tma.cuh), then stored by one thread with TMA, which clips the
// rows and columns outside C. Each warp writes its 16 rows with stmatrix, 16 columns per
// instruction; the swizzle puts the 8 rows of each 8x8 matrix in 8 different 16-byte
// bank groups. The previous tile's stores must have read the staging area first.
// OUT_DIV = 2 (an epilogue that halves the width, kOutDiv): the tile's first ACC / 2
// accumulators hold a BN / 2-wide output tile, stored at column n0 / 2 of C.
template <class Cfg, int OUT_DIV = 1>
__device__ __forceinline__ void store_tile_tma(const float (&r_acc)[Cfg::ACC], const CUtensorMap* tm_c,
                                               uint32_t s_c, const Tile& tl, int w, int warp_in_wg, int lane) {
  constexpr int COLS = Cfg::BN / OUT_DIV / Cfg::C_ROUNDS;  // columns staged per round
  static_assert(COLS % 64 == 0, "whole 64-column boxes");
  const bool leader = warp_in_wg == 0 && lane == 0;
  auto pack = [](float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  };
#pragma unroll
  for (int round = 0; round < Cfg::C_ROUNDS; ++round) {
    if (leader) klab::tma_store_wait_read<0>();  // the staging area's last stores have read it
    klab::named_barrier_sync(1 + w, 128);
#pragma unroll
    for (int jn = 0; jn < COLS / 16; ++jn) {  // 16 columns per step: n8 blocks 2jn, 2jn+1
      const uint32_t addr = staging_row(s_c, warp_in_wg, lane, jn * 16);  // within the round
      const float* a = &r_acc[round * (COLS / 2) + 8 * jn];  // n8 block 2jn: a[0..3], 2jn+1: a[4..7]
      klab::stmatrix_x4(addr, pack(a[0], a[1]), pack(a[2], a[3]), pack(a[4], a[5]), pack(a[6], a[7]));
    }
    klab::fence_proxy_async_smem();  // the copy engine reads what these stores wrote
    klab::named_barrier_sync(1 + w, 128);
    if (leader) {
#pragma unroll
      for (int b = 0; b < COLS / 64; ++b)
        klab::tma_store_3d(tm_c, s_c + b * 8192, tl.n0 / OUT_DIV + round * COLS + 64 * b, tl.m0 + (Cfg::PINGPONG ? 0 : 64 * w), tl.z);
      klab::tma_store_commit();
    }
  }
}

// ======================================================================================
// Kernel: v14 (in-line copies), v15 (a copy warpgroup), v16 (persistent), v17 (split-K),
// v18 (clusters), v19 (the TMA-store epilogue), v21 (ping-pong warpgroups)
// ======================================================================================
template <class Cfg, bool AK, bool BK, class TC, class Epi>
__global__ void __launch_bounds__(Cfg::NT, 1)
    matmul_wgmma(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                 const __grid_constant__ CUtensorMap tm_c, const __grid_constant__ CUtensorMap tm_src, GemmArgs g,
                 int units_m, int tiles_n, int units_total, bool c_pair, bool tma_store, Epi epi) {
#ifndef KLAB_NO_WGMMA
  constexpr int STAGES = Cfg::STAGES, BN = Cfg::BN, CLUSTER = Cfg::CLUSTER;
  constexpr int TA = AK ? 0 : 1, TB = BK ? 0 : 1;  // wgmma reads M/N-major operands transposed
  extern __shared__ __align__(1024) unsigned char s_raw[];
  // Each stage: A tile (A_BYTES) then B tile; every box 1024-aligned for the swizzle.
  const uint32_t s_stages = (klab::smem_u32(s_raw) + 1023u) & ~1023u;
  const uint32_t s_ctile = s_stages + STAGES * Cfg::STAGE_BYTES;  // C_BYTES (TMA_STORE)
  const uint32_t s_full = s_ctile + Cfg::C_BYTES;                   // STAGES mbarriers of 8 bytes
  const uint32_t s_empty = s_full + STAGES * 8;
  constexpr int EPI_SMEM = epi_smem_bytes<Epi>();  // the epilogue's, per MMA warpgroup, 16-aligned
  constexpr bool SRC = epi_has_source<Epi>();
  constexpr int OUT_DIV = epi_out_div<Epi>();
  static_assert(OUT_DIV == 1 || (OUT_DIV == 2 && Cfg::TMA_STORE && !SRC), "a halved output is stored by TMA");
  static_assert(!SRC || (Cfg::TMA_STORE && Cfg::C_ROUNDS == 1), "a source tile takes the whole C staging area");
  const uint32_t s_src = (s_empty + STAGES * 8 + 15u) & ~15u;       // SRC: one mbarrier per MMA warpgroup
  const uint32_t s_epi_all = s_src + (SRC ? 16u : 0u);
  auto stage_a = [&](int s) { return s_stages + s * Cfg::STAGE_BYTES; };

  const int wg = threadIdx.x / 128, warp_in_wg = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int rank = CLUSTER > 1 ? static_cast<int>(klab::cluster_rank()) : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      klab::mbar_init(s_full + 8 * s, 1);  // the copying thread's arrive + bytes
      // One arrive per MMA warp of every CTA whose stage s this CTA's copies write.
      klab::mbar_init(s_empty + 8 * s, CLUSTER * Cfg::READERS * 4);
    }
    if constexpr (SRC)
      for (int c = 0; c < Cfg::CONSUMERS; ++c) klab::mbar_init(s_src + 8 * c, 1);  // its copier's arrive + bytes
    klab::mbar_fence_init();
  }
  // The other CTA's copies and arrivals may target these barriers only once they exist.
  if constexpr (CLUSTER > 1) klab::cluster_sync();
  else __syncthreads();
  // Persistent: unit t, t + stride, ...; otherwise the one unit of this block.
  const int first = Cfg::PERSISTENT ? blockIdx.x / CLUSTER : blockIdx.x + blockIdx.z * gridDim.x;
  const int stride = Cfg::PERSISTENT ? gridDim.x / CLUSTER : units_total;

  // Refill number j of the ring (j counts k-steps over all tiles of this block): wait until
  // the MMAs of the previous use of its stage are done, then copy.
  auto produce = [&](int j, const Tile& tl, int kt) {
    const int s = j % STAGES;
    klab::mbar_wait(s_empty + 8 * s, ((j / STAGES) & 1) ^ 1);
    load_stage<Cfg, AK, BK>(&tm_a, &tm_b, stage_a(s), s_full + 8 * s, tl, tl.k0 + kt * Cfg::BK, rank);
  };

  // ---- the copy warpgroup (v15 ... v19) ---------------------------------------------------
  if (Cfg::WS && wg == 0) {
    klab::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      int j = 0;
      for (int t = first; t < units_total; t += stride) {
        const Tile tl = tile_at<Cfg>(t, g, units_m, tiles_n, rank);
        for (int kt = 0; kt < tl.k_tiles; ++kt, ++j) produce(j, tl, kt);
      }
    }
    // A CTA of a cluster leaves only with the other: its copies and arrivals target us.
    if constexpr (CLUSTER > 1) klab::cluster_sync();
    return;
  }

  // ---- the MMA warpgroups ----------------------------------------------------------------
  if constexpr (Cfg::WS) klab::setmaxnreg_inc<kConsumerRegs>();
  const int w = Cfg::WS ? wg - 1 : wg;        // which MMA warpgroup
  const int wm = Cfg::PINGPONG ? 0 : w;      // which 64 rows of the block tile it computes
  // Descriptor strides (wgmma.cuh): K-major: SBO 1024, k-step +32 bytes; M/N-major: SBO
  // 1024, LBO 8 KB (next 64-wide box), k-step +2048 bytes.
  const uint32_t a_off = AK ? wm * 64 * 128 : wm * 8192;
  // A stage is free when the MMA warps of every CTA that its copies fed are done with it.
  auto release = [&](uint32_t s_bar) {
    if constexpr (CLUSTER == 1) klab::mbar_arrive(s_bar);
    else
      for (int c = 0; c < CLUSTER; ++c) klab::mbar_arrive_cluster(s_bar, c);
  };
  float r_acc[Cfg::ACC];
  int j = 0, src_tiles = 0;
  const uint32_t s_cw = s_ctile + w * (Cfg::C_BYTES / Cfg::CONSUMERS);  // this warpgroup's staging area
  const uint32_t s_epi = s_epi_all + w * EPI_SMEM;
  int i = 0;  // the block's tiles in order (ping-pong: warpgroup w takes those with i % 2 == w)
  for (int t = first; t < units_total; t += stride, ++i) {
    const Tile tl = tile_at<Cfg>(t, g, units_m, tiles_n, rank);
    if constexpr (Cfg::PINGPONG) {
      if (i % 2 != w) {  // the other warpgroup's tile: its stages come next in the ring
        j += tl.k_tiles;
        continue;
      }
    }
    if constexpr (EPI_SMEM > 0) {  // the last tile's apply() has read its staging area
      klab::named_barrier_sync(1 + w, 128);
      unsigned char* s_epi_ptr = s_raw + (s_epi - klab::smem_u32(s_raw));
      if constexpr (epi_tile_rows<Epi>()) epi.load_tile(s_epi_ptr, tl.m0 + 64 * wm, tl.n0, threadIdx.x % 128);
      else epi.load_tile(s_epi_ptr, tl.n0, threadIdx.x % 128);
      klab::cp_async_commit();
    }
    if (!Cfg::WS && threadIdx.x == 0)
      for (int kt = 0; kt < min(STAGES, tl.k_tiles); ++kt) produce(kt, tl, kt);
    if constexpr (!Cfg::WS) __syncwarp();
#pragma unroll
    for (int a = 0; a < Cfg::ACC; ++a) r_acc[a] = 0.f;
    // Ping-pong: wait for the turn (the other warpgroup has issued its last tile's MMAs and
    // waited on every stage before ours). Besides ordering the tensor cores, this keeps each
    // full barrier's wait at most one phase ahead of the barrier, which its parity needs.
    if constexpr (Cfg::PINGPONG)
      if (i > 0) klab::named_barrier_sync(kTurnBarrier + w, 256);

    for (int kt = 0; kt < tl.k_tiles; ++kt, ++j) {
      const int s = j % STAGES;
      klab::mbar_wait(s_full + 8 * s, (j / STAGES) & 1);
      const uint32_t s_a = stage_a(s) + a_off, s_b = stage_a(s) + Cfg::A_BYTES;
      klab::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Cfg::BK / 16; ++kk) {
        const uint64_t d_a = klab::smem_desc_sw128(s_a + (AK ? 32 * kk : 2048 * kk), 8192, 1024);
        const uint64_t d_b = klab::smem_desc_sw128(s_b + (BK ? 32 * kk : 2048 * kk), 8192, 1024);
        klab::wgmma_bf16<BN, TA, TB>(r_acc, d_a, d_b, 1);
      }
      klab::wgmma_commit();
      if constexpr (SRC) {  // the source block, copied while this tile's MMAs run
        if (kt == tl.k_tiles / 2 && warp_in_wg == 0 && lane == 0) {
          klab::tma_store_wait_read<0>();  // the previous tile's store has read the staging area
          klab::mbar_arrive_expect_tx(s_src + 8 * w, 64 * BN * 2);
#pragma unroll
          for (int b = 0; b < BN / 64; ++b)
            klab::tma_load_3d(s_cw + b * 8192, &tm_src, s_src + 8 * w, tl.n0 + 64 * b, tl.m0 + 64 * wm, tl.z);
        }
        __syncwarp();
      }
      klab::wgmma_wait<1>();  // the previous step's MMAs are done: release its stage
      if (kt > 0) {
        if (lane == 0) release(s_empty + 8 * ((j - 1) % STAGES));
        // v14: the copying thread refills that stage with the step STAGES - 1 ahead.
        if (!Cfg::WS && threadIdx.x == 0 && kt - 1 + STAGES < tl.k_tiles) produce(j - 1 + STAGES, tl, kt - 1 + STAGES);
        if constexpr (!Cfg::WS) __syncwarp();  // warp 0 reconverges before the next wgmma (.aligned)
      }
    }
    // Ping-pong: hand the turn to the other warpgroup if the block has a next tile (it syncs
    // on kTurnBarrier + its index before that tile; an arrive nobody waits for is never made).
    if constexpr (Cfg::PINGPONG)
      if (t + stride < units_total) klab::named_barrier_arrive(kTurnBarrier + (1 - w), 256);
    klab::wgmma_wait<0>();
    klab::wgmma_fence_acc(r_acc);
    if (tl.k_tiles > 0 && lane == 0) release(s_empty + 8 * ((j - 1) % STAGES));
    // The fused epilogue (an epilogue type of another lesson), on the fp32 accumulators.
    const int e_row = tl.m0 + wm * 64 + warp_in_wg * 16 + lane / 4, e_col = tl.n0 + 2 * (lane % 4);
    if constexpr (SRC) {
      if constexpr (EPI_SMEM > 0) klab::cp_async_wait<0>();
      klab::mbar_wait(s_src + 8 * w, src_tiles++ & 1);  // the source block has landed
      if constexpr (EPI_SMEM > 0) klab::named_barrier_sync(1 + w, 128);
      epi.apply(r_acc, e_row, e_col, s_raw + (s_epi - klab::smem_u32(s_raw)), SourceTile{s_cw, warp_in_wg, lane});
    } else if constexpr (EPI_SMEM > 0) {
      klab::cp_async_wait<0>();
      klab::named_barrier_sync(1 + w, 128);  // every thread's copies of this tile have landed
      epi.apply(r_acc, e_row, e_col, s_raw + (s_epi - klab::smem_u32(s_raw)));
    } else {
      epi.apply(r_acc, e_row, e_col);
    }

    if constexpr (Cfg::TMA_STORE && sizeof(TC) == 2) {
      if (tma_store) {
        store_tile_tma<Cfg, OUT_DIV>(r_acc, &tm_c, s_cw, tl, w, warp_in_wg, lane);
        continue;
      }
    }
    // Epilogue: each thread stores its fragment straight from registers (wgmma.cuh gives
    // the layout); in v16 the copy warpgroup is already loading the next tile meanwhile.
    // (A halved output always goes by TMA: the launcher requires it.)
    if constexpr (OUT_DIV == 1) {
      TC* g_c = static_cast<TC*>(g.C) + static_cast<int64_t>(tl.z) * g.sC;
      const int row = tl.m0 + wm * 64 + warp_in_wg * 16 + lane / 4;
      const int col = tl.n0 + 2 * (lane % 4);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = row + 8 * h;
        if (m >= g.M) continue;
        const int64_t row_off = static_cast<int64_t>(m) * g.ldc;
#pragma unroll
        for (int jn = 0; jn < BN / 8; ++jn)
          store_pair<TC>(g_c, row_off, col + 8 * jn, g.N, r_acc[4 * jn + 2 * h], r_acc[4 * jn + 2 * h + 1], c_pair);
      }
    }
  }
  // The last TMA stores must have read shared memory before the block leaves.
  if constexpr (Cfg::TMA_STORE) {
    if (threadIdx.x % 128 == 0) klab::tma_store_wait<0>();
  }
  if constexpr (CLUSTER > 1) klab::cluster_sync();
#endif
}

// ======================================================================================
// Launchers
// ======================================================================================
// "" when every operand of this launch can be described to TMA, else why not.
std::string tma_ok(const GemmArgs& g) {
  std::string why = klab::tma_describable(g.A, g.lda, g.sA, 2);
  if (why.empty()) why = klab::tma_describable(g.B, g.ldb, g.sB, 2);
  return why;
}

// Which layouts an instance compiles: all three (lesson 05), or only the one its caller
// uses (lesson 06's linear layer, nt; its backward through the next layer's weight, nn).
enum class Layouts { all, nn, nt };

template <class Cfg, class TC, class Epi = NoEpilogue, Layouts ONLY = Layouts::all>
void launch_wgmma(const GemmArgs& g, const std::string& variant, int batch, cudaStream_t s, Epi epi = {}) {
  static_assert(std::is_same_v<Epi, NoEpilogue> || sizeof(TC) == 2, "an epilogue is fused into bf16 outputs, not split-K partials");
  if (empty_output(g) || batch == 0) return;
  const std::string why = tma_ok(g);
  KLAB_REQUIRE(why.empty(), "matmul (TMA): " + why);
  KLAB_REQUIRE(g.splits == 1 || g.k_chunk % Cfg::BK == 0, "matmul (TMA): a K slice must be a multiple of 64");
  // Work units: CLUSTER tiles stacked in M (tile_at).
  const int units_m = static_cast<int>(klab::ceil_div<int64_t>(g.M, int64_t{Cfg::BM} * Cfg::CLUSTER));
  const int tiles_n = static_cast<int>(klab::ceil_div<int64_t>(g.N, Cfg::BN));
  const int64_t z = static_cast<int64_t>(batch) * g.splits;
  const int64_t total = static_cast<int64_t>(units_m) * tiles_n * z;
  KLAB_REQUIRE(total < (int64_t{1} << 31), "matmul (TMA): more than 2^31 tiles");
  if (g.K == 0) {  // C = 0; an operand with no columns cannot be described to TMA
    KLAB_REQUIRE((std::is_same_v<Epi, NoEpilogue>), "matmul (TMA): at K = 0 the caller applies its epilogue to C = 0");
    KLAB_REQUIRE(g.ldc == g.N && g.sC == static_cast<int64_t>(g.M) * g.N, "matmul (TMA): C must be dense");
    KLAB_CHECK_CUDA(cudaMemsetAsync(g.C, 0, static_cast<std::size_t>(z * g.sC) * sizeof(TC), s));
    return;
  }
  auto launch_layout = [&]<bool AK, bool BK>() {
    // Maps over the whole operands (batch entries as the third dimension); box shapes as
    // load_stage copies them.
    const CUtensorMap tm_a = AK ? klab::tensor_map_bf16(g.A, g.K, g.M, batch, g.lda, g.sA, 64, Cfg::BM)
                                : klab::tensor_map_bf16(g.A, g.M, g.K, batch, g.lda, g.sA, 64, 64);
    const CUtensorMap tm_b = BK ? klab::tensor_map_bf16(g.B, g.K, g.N, batch, g.ldb, g.sB, 64, Cfg::BN / Cfg::CLUSTER)
                                : klab::tensor_map_bf16(g.B, g.N, g.K, batch, g.ldb, g.sB, 64, 64);
    // C through TMA (v19) where its pitch allows; the map is unused otherwise.
    // A halved output (kOutDiv = 2) has g.N / 2 columns.
    constexpr int out_div = epi_out_div<Epi>();
    const bool tma_store = Cfg::TMA_STORE && sizeof(TC) == 2 && klab::tma_describable(g.C, g.ldc, g.sC, 2).empty();
    KLAB_REQUIRE(out_div == 1 || (tma_store && g.N % 16 == 0),
                 "matmul (TMA): a halved output needs the TMA store (its row pitch a multiple of 8) and N a multiple of 16");
    const CUtensorMap tm_c = tma_store ? klab::tensor_map_bf16(g.C, g.N / out_div, g.M, z, g.ldc, g.sC, 64, 64) : tm_a;
    // An epilogue's source tile: C's shape, pitch and boxes (unused otherwise).
    CUtensorMap tm_src = tm_a;
    if constexpr (epi_has_source<Epi>()) {
      KLAB_REQUIRE(tma_store, "matmul (TMA): an epilogue's source tile needs C's row pitch a multiple of 8 (the TMA store's)");
      KLAB_REQUIRE(g.splits == 1, "matmul (TMA): an epilogue's source tile needs the whole of K in one slice");
      tm_src = klab::tensor_map_bf16(epi.source, g.N, g.M, z, g.ldc, g.sC, 64, 64);
    }
    auto kernel = matmul_wgmma<Cfg, AK, BK, TC, Epi>;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute cluster;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim = {static_cast<unsigned>(Cfg::CLUSTER), 1, 1};
    cfg.blockDim = dim3(Cfg::NT);
    // After the stages' mbarriers, 16-aligned: the source tile's mbarriers, the epilogue's staging areas.
    constexpr bool src = epi_has_source<Epi>();
    constexpr int smem = Cfg::SMEM_BYTES + (epi_smem_bytes<Epi>() > 0 || src ? 16 + (src ? 16 : 0) + Cfg::CONSUMERS * epi_smem_bytes<Epi>() : 0);
    static_assert(smem <= 227 * 1024, "the epilogue's shared memory does not fit beside the stages");
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = &cluster;
    cfg.numAttrs = Cfg::CLUSTER > 1 ? 1 : 0;
    // Raise the shared-memory limit (per GPU), and, once an instantiation, count how many
    // blocks — clusters of CLUSTER — fit on the GPU at once: that many walk the tiles. (A
    // static initialised once even when threads of several GPUs launch it first together.)
    klab::allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
    static const int resident = [&] {
      int n = klab::device_info().sms;
      if constexpr (Cfg::CLUSTER > 1) {
        cfg.gridDim = dim3(Cfg::CLUSTER * n);
        KLAB_CHECK_CUDA(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg));
        KLAB_REQUIRE(n > 0, "matmul (TMA): no cluster of " + std::to_string(Cfg::CLUSTER) + " fits");
      }
      return n;
    }();
    if constexpr (Cfg::PERSISTENT) {
      cfg.gridDim = dim3(static_cast<unsigned>(Cfg::CLUSTER * std::min<int64_t>(total, resident)));
    } else {
      KLAB_REQUIRE(z <= 65535, "matmul (TMA): batch x splits over 65535");
      cfg.gridDim = dim3(static_cast<unsigned>(units_m) * tiles_n, 1, static_cast<unsigned>(z));
    }
    KLAB_CHECK_CUDA(cudaLaunchKernelEx(&cfg, kernel, tm_a, tm_b, tm_c, tm_src, g, units_m, tiles_n, static_cast<int>(total),
                                       pair_ok(g, sizeof(TC)), tma_store, epi));
    KLAB_CHECK_LAUNCH();
  };
  if constexpr (ONLY == Layouts::nt) {
    KLAB_REQUIRE(variant == "nt", "matmul (TMA): this launch is compiled for the nt layout only");
    launch_layout.template operator()<true, true>();
  } else if constexpr (ONLY == Layouts::nn) {
    KLAB_REQUIRE(variant == "nn", "matmul (TMA): this launch is compiled for the nn layout only");
    launch_layout.template operator()<true, false>();
  } else {
    dispatch_layout(variant, launch_layout);
  }
}


}  // namespace
}  // namespace lesson05
