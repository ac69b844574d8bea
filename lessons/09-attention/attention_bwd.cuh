// lessons/09-attention/attention_bwd.cuh — what the mma.sync kernels of attention_bwd share:
// attention_bwd_mma.cu's v1_mma_atomic_dq and v2_mma_deterministic, and exercise_bwd.cu's
// exercise (v1's dK/dV kernel with its heart left to the learner).
//
//   BwdArgs, BwdTiles        the launch arguments; the dK/dV kernel's tiles and shared memory
//   attention_bwd_dot_do_o   D = rowsum(dO ⊙ O) and L in base 2, one warp a query row
//   attention_bwd_v1_mma_atomic_dq_convert
//                            dQ = dQ_acc / sqrt(d), rounded: v1's last kernel (and the exercise's)
//   DkvBlock                 a dK/dV block: its keys, its walk over the query tiles, the copies
//   products                 two warp products X = A_w · Bᵀ: the dK/dV kernel's Sᵀ and dPᵀ, v2's
//                            dQ kernel's S and dP
//   add_dq_atomic            dQ += dS · K of a tile through shared memory, by fp32 atomics
//   store_dkv                dK / sqrt(d) and dV, rounded once
//   bwd_args, workspace_floats, supports_bwd, launch_dkv, launch_dq_convert: the launchers' parts
//
// The device pieces are __forceinline__, and a kernel built of them compiles to the same SASS
// as with their code written inline (compared instruction by instruction when they moved
// here), with one care: what a kernel's inner loops read of a DkvBlock it copies into locals
// first (DkvBlock says why). Everything here is in an anonymous namespace inside lesson09:
// each file that includes it compiles its own instances (as lesson 05's matmul_wgmma.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "attention.cuh"
#include "klab/device.hpp"
#include "klab/device/cp_async.cuh"
#include "klab/device/mma.cuh"
#include "klab/device/wgmma.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace lesson09 {
namespace {

using std::uint32_t;

// The launch arguments: the op's tensors, and the workspace's fp32 arrays (D, L in base 2,
// and v1's dQ accumulator).
struct BwdArgs {
  const void *q, *k, *v, *o, *dout;
  const float* lse;
  void *dq, *dk, *dv;
  float* dq_acc;   // (B Hq Sq, d), zeroed by the harness; v1 only
  float* delta;    // (B Hq Sq): D = dO · O
  float* lse2;     // (B Hq Sq): L log2(e); +inf for a row that sees no key (its P is 0)
  int B, Hq, Hkv, Sq, Sk, d;
  bool causal;
  float scale;       // 1 / sqrt(d)
  float scale_log2;  // log2(e) / sqrt(d)
};

// The dK/dV kernel's tiles for head dim D: 64 keys a block (4 warps x 16), query tiles of
// kBM rows: 64 at D = 64, 32 at D = 128, where the dK and dV accumulators (2 x 64 floats a
// thread) leave no room for a 64-wide Sᵀ and dPᵀ (2 x 32 more) under 255 registers.
template <int D>
struct BwdTiles {
  static constexpr int kWarps = 4, kThreads = kWarps * 32;
  static constexpr int kBN = 16 * kWarps;        // keys a block
  static constexpr int kBM = D == 128 ? 32 : 64; // queries a tile
  static constexpr int kRowBytes = D * 2;
  static constexpr int kKVBytes = kBN * kRowBytes, kQBytes = kBM * kRowBytes;
  static constexpr int kDSBytes = kBM * kBN * 2;   // dS, (query, key): rows of 64 keys, 128 bytes
  // K, V once; Q and dO twice (the ring); dS; L and D of the tile.
  static constexpr int kSmemBytes = 2 * kKVBytes + 4 * kQBytes + kDSBytes + 2 * kBM * 4;
  // dQ's tile (kBM x D) over the 4 warps: kWarpsM row blocks of 16, kWarpsN column blocks.
  static constexpr int kWarpsM = kBM / 16, kWarpsN = kWarps / kWarpsM, kDQCols = D / kWarpsN;
  static_assert(D % 16 == 0 && D / 8 >= 8, "k16 steps; 8 chunks a row for the swizzle");
  static_assert(kBM % 16 == 0 && kWarps % kWarpsM == 0 && kDQCols % 16 == 0, "dQ's warp tiling");
  static_assert(kBN * 2 == 128, "dS rows of 8 chunks: the swizzle of swz<64>");
};

// ============================================================================================
// D and L in base 2, and v1's dQ conversion
// ============================================================================================

// One warp a query row.
template <class T, int D>
__global__ void attention_bwd_dot_do_o(const BwdArgs a, i64 rows) {
  const i64 row = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* o = static_cast<const T*>(a.o) + row * D;
  const T* dout = static_cast<const T*>(a.dout) + row * D;
  float acc = 0.f;
#pragma unroll
  for (int e = lane * 2; e < D; e += 64) {   // two 16-bit elements a lane a step
    acc += klab::to_f32(o[e]) * klab::to_f32(dout[e]);
    acc += klab::to_f32(o[e + 1]) * klab::to_f32(dout[e + 1]);
  }
  acc = klab::warp_sum(acc);
  if (lane == 0) {
    a.delta[row] = acc;
    const float l = a.lse[row];
    a.lse2[row] = l == -INFINITY ? INFINITY : l * 1.4426950408889634f;
  }
}

// dQ = dQ_acc / sqrt(d), rounded: v1's last kernel, two elements a thread.
template <class T>
__global__ void attention_bwd_v1_mma_atomic_dq_convert(const BwdArgs a, i64 pairs) {
  const i64 k = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= pairs) return;
  const float2 x = reinterpret_cast<const float2*>(a.dq_acc)[k];
  reinterpret_cast<uint32_t*>(a.dq)[k] = klab::pack_pair<T>(x.x * a.scale, x.y * a.scale);
}

// ============================================================================================
// The dK/dV kernel's pieces
// ============================================================================================

// A dK/dV block. Grid: one block per (64 keys, batch x K/V head), 1D. The block walks tiles
// t of (head of its group, query tile), the heads outermost, each tile's Q and dO copied by
// cp.async into stage t & 1 of a ring of two. Warp w owns keys k0 + 16 w .. + 15; lane l
// holds rows l / 4 and l / 4 + 8 of them (g), columns 2 (l % 4) (c) of each n8 block.
//
// A kernel copies the members its tile loop reads into locals (const int k0 = blk.k0, ...)
// and computes its key_row after load_first(), where v1 always did: read as blk.k0 inside
// the loop, or key_row made a member, v1 compiled to other SASS (more instructions, other
// registers), though the values are the same.
template <class T, int D>
struct DkvBlock {
  using C = BwdTiles<D>;
  const BwdArgs& a;
  uint32_t s_k, s_v;       // K and V of the block's keys, (64, D), swizzled
  uint32_t s_q, s_do;      // Q[stage] at s_q + stage * kQBytes, dO[stage] likewise: (kBM, D)
  uint32_t s_ds;           // dS (kBM queries, 64 keys), swz<64>
  float *s_l, *s_dd;       // (kBM): L (base 2) and D of the tile's queries
  int tid, warp, lane, g, c;
  i64 bhk, b, hk;          // the (batch, K/V head), and each
  int k0, group;           // the block's first key; query heads a K/V head
  const T *g_k, *g_v;      // (Sk, D) of the K/V head
  int diag, tile0, per_head, tiles;   // Sk - Sq; the query tiles: tile0.. of each head, `tiles` in all
  unsigned char* s_ds_p;   // s_ds as a generic pointer, for 16-bit stores

  __device__ __forceinline__ DkvBlock(const BwdArgs& args, unsigned char* s_raw) : a(args) {
    s_k = klab::smem_u32(s_raw);
    s_v = s_k + C::kKVBytes;
    s_q = s_v + C::kKVBytes;
    s_do = s_q + 2 * C::kQBytes;
    s_ds = s_do + 2 * C::kQBytes;
    s_l = reinterpret_cast<float*>(s_raw + 2 * C::kKVBytes + 4 * C::kQBytes + C::kDSBytes);
    s_dd = s_l + C::kBM;

    tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    g = lane / 4, c = lane % 4;
    const int key_blocks = (a.Sk + C::kBN - 1) / C::kBN;
    bhk = blockIdx.x / key_blocks;
    k0 = (blockIdx.x % key_blocks) * C::kBN;
    b = bhk / a.Hkv, hk = bhk % a.Hkv;
    group = a.Hq / a.Hkv;
    g_k = static_cast<const T*>(a.k) + bhk * a.Sk * D;
    g_v = static_cast<const T*>(a.v) + bhk * a.Sk * D;

    // The query tiles that see a key of the block: causal, query i sees key j iff
    // i >= j - diag, so the block's first key k0 is seen from row k0 - diag on.
    diag = a.Sk - a.Sq;
    const int q_first = a.causal ? max(0, k0 - diag) : 0;
    tile0 = q_first / C::kBM;
    per_head = q_first >= a.Sq ? 0 : (a.Sq + C::kBM - 1) / C::kBM - tile0;
    tiles = per_head * group;
    s_ds_p = s_raw + 2 * C::kKVBytes + 4 * C::kQBytes;
  }

  // Tile t's head and first query row.
  __device__ __forceinline__ void tile_at(int t, i64& bh, int& q0) const {
    bh = b * a.Hq + hk * group + t / per_head;
    q0 = (tile0 + t % per_head) * C::kBM;
  }

  // Tile t's Q and dO into stage t & 1.
  __device__ __forceinline__ void load_tile(int t) const {
    i64 bh;
    int q0;
    tile_at(t, bh, q0);
    const int stage = t & 1;
    copy_tile_async<C::kBM, D, C::kThreads>(s_q + stage * C::kQBytes, static_cast<const T*>(a.q) + bh * a.Sq * D, q0,
                                            a.Sq, tid);
    copy_tile_async<C::kBM, D, C::kThreads>(s_do + stage * C::kQBytes, static_cast<const T*>(a.dout) + bh * a.Sq * D,
                                            q0, a.Sq, tid);
  }

  // Before the walk: the block's K and V, and the first tile.
  __device__ __forceinline__ void load_first() const {
    if (tiles > 0) {
      copy_tile_async<C::kBN, D, C::kThreads>(s_k, g_k, k0, a.Sk, tid);
      copy_tile_async<C::kBN, D, C::kThreads>(s_v, g_v, k0, a.Sk, tid);
      load_tile(0);
      klab::cp_async_commit();
    }
  }

  // Tile t begins: its L and D into shared memory (rows past Sq: L = +inf, so P = 0), the
  // next tile's copies issued into the other stage (freed by the last tile's closing
  // barrier), this tile's waited for; then a barrier, after which all of it may be read.
  __device__ __forceinline__ void begin_tile(int t, i64& bh, int& q0) const {
    tile_at(t, bh, q0);
    if (tid < C::kBM) {
      const bool in = q0 + tid < a.Sq;
      s_l[tid] = in ? a.lse2[bh * a.Sq + q0 + tid] : INFINITY;
      s_dd[tid] = in ? a.delta[bh * a.Sq + q0 + tid] : 0.f;
    }
    if (t + 1 < tiles) {
      load_tile(t + 1);
      klab::cp_async_commit();
      klab::cp_async_wait<1>();
    } else {
      klab::cp_async_wait<0>();
    }
    __syncthreads();
  }
};

// X = A1_w · B1ᵀ and Y = A2_w · B2ᵀ (16 x N a warp, N = 8 NB), from (rows, D) tiles in shared
// memory, swizzled: the warp's 16 rows of A1 and A2 (A fragments, as the forward reads Q)
// against the N rows of B1 and B2 (B fragments, as the forward reads K). The dK/dV kernel's
// Sᵀ = K_w · Q_tᵀ and dPᵀ = V_w · dO_tᵀ; v2's dQ kernel's S = Q_w · K_tᵀ and dP = dO_w · V_tᵀ.
template <class T, int D, int NB>
__device__ __forceinline__ void products(uint32_t s_a1, uint32_t s_b1, uint32_t s_a2, uint32_t s_b2, int warp,
                                         int lane, float (&r_x)[NB][4], float (&r_y)[NB][4]) {
  static_assert(NB % 2 == 0, "ldmatrix_x4 feeds two n8 blocks");
#pragma unroll
  for (int n = 0; n < NB; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) r_x[n][e] = r_y[n][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t r_a[4];
    klab::ldmatrix_x4(r_a, s_a1 + swz<D>(warp * 16 + (lane / 8 % 2) * 8 + lane % 8, 2 * kk + lane / 16));
#pragma unroll
    for (int n = 0; n < NB; n += 2) {
      uint32_t r_b[4];
      klab::ldmatrix_x4(r_b, s_b1 + swz<D>((n + lane / 16) * 8 + lane % 8, 2 * kk + lane / 8 % 2));
      klab::mma_m16n8k16<T>(r_x[n], r_a, r_b[0], r_b[1]);
      klab::mma_m16n8k16<T>(r_x[n + 1], r_a, r_b[2], r_b[3]);
    }
    klab::ldmatrix_x4(r_a, s_a2 + swz<D>(warp * 16 + (lane / 8 % 2) * 8 + lane % 8, 2 * kk + lane / 16));
#pragma unroll
    for (int n = 0; n < NB; n += 2) {
      uint32_t r_b[4];
      klab::ldmatrix_x4(r_b, s_b2 + swz<D>((n + lane / 16) * 8 + lane % 8, 2 * kk + lane / 8 % 2));
      klab::mma_m16n8k16<T>(r_y[n], r_a, r_b[0], r_b[1]);
      klab::mma_m16n8k16<T>(r_y[n + 1], r_a, r_b[2], r_b[3]);
    }
  }
}

// dQ of tile (bh, q0) += dS · K_block, by fp32 atomics into a.dq_acc (many key blocks add to
// the same dQ rows). r_ds: dS with keys in rows, the Sᵀ fragments' layout; dQ needs queries
// in rows, so dS goes through shared memory once a tile. The caller's next barrier frees it.
template <class T, int D>
__device__ __forceinline__ void add_dq_atomic(const DkvBlock<T, D>& blk, i64 bh, int q0,
                                              const float (&r_ds)[BwdTiles<D>::kBM / 8][4]) {
  using C = BwdTiles<D>;
  constexpr int kNS = C::kBM / 8;
  const BwdArgs& a = blk.a;
  const int warp = blk.warp, lane = blk.lane, g = blk.g, c = blk.c;
  // dS into shared memory with queries in rows (the transpose of the fragments): 16-bit
  // stores, query q0 + 8 n + 2 c + (e & 1), key warp * 16 + g + 8 (e >> 1).
  unsigned char* s_ds_p = blk.s_ds_p;
#pragma unroll
  for (int n = 0; n < kNS; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int qr = n * 8 + 2 * c + (e & 1), kc = warp * 16 + g + (e >> 1) * 8;
      T* dst = reinterpret_cast<T*>(s_ds_p + swz<C::kBN>(qr, kc / 8) + (kc % 8) * 2);
      *dst = klab::from_f32<T>(r_ds[n][e]);
    }
  __syncthreads();
  // dQ_t (kBM x D) += dS (kBM x 64 keys) · K (64 x D): warp (wm, wn) takes rows
  // 16 wm.., columns kDQCols wn..; A = dS as stored (the forward's Q pattern), B = K
  // transposed (ldmatrix.trans).
  constexpr int kNQ = C::kDQCols / 8;
  const int wm = warp % C::kWarpsM, wn = warp / C::kWarpsM;
  float r_dq[kNQ][4];
#pragma unroll
  for (int n = 0; n < kNQ; ++n) r_dq[n][0] = r_dq[n][1] = r_dq[n][2] = r_dq[n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < C::kBN / 16; ++kk) {
    uint32_t r_a[4];
    klab::ldmatrix_x4(r_a, blk.s_ds + swz<C::kBN>(wm * 16 + (lane / 8 % 2) * 8 + lane % 8, 2 * kk + lane / 16));
#pragma unroll
    for (int n = 0; n < kNQ; n += 2) {
      uint32_t r_b[4];
      klab::ldmatrix_x4<true>(
          r_b, blk.s_k + swz<D>(16 * kk + (lane / 8 % 2) * 8 + lane % 8, wn * (C::kDQCols / 8) + n + lane / 16));
      klab::mma_m16n8k16<T>(r_dq[n], r_a, r_b[0], r_b[1]);
      klab::mma_m16n8k16<T>(r_dq[n + 1], r_a, r_b[2], r_b[3]);
    }
  }
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int q = q0 + wm * 16 + g + rr * 8;
    if (q >= a.Sq) continue;
    float* dst = a.dq_acc + (bh * a.Sq + q) * D + wn * C::kDQCols + 2 * c;
#pragma unroll
    for (int n = 0; n < kNQ; ++n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      atomicAdd(reinterpret_cast<float2*>(dst + n * 8), make_float2(r_dq[n][2 * rr], r_dq[n][2 * rr + 1]));
#else
      atomicAdd(dst + n * 8, r_dq[n][2 * rr]);
      atomicAdd(dst + n * 8 + 1, r_dq[n][2 * rr + 1]);
#endif
    }
  }
}

// The walk's end: dK (scaled by 1/sqrt(d)) and dV, rounded once; rows past Sk are not
// stored. A key no query sees (tiles = 0) gets zeros.
template <class T, int D>
__device__ __forceinline__ void store_dkv(const DkvBlock<T, D>& blk, int key_row, const float (&r_dk)[D / 8][4],
                                          const float (&r_dv)[D / 8][4]) {
  const BwdArgs& a = blk.a;
  T* g_dk = static_cast<T*>(a.dk) + blk.bhk * a.Sk * D;
  T* g_dv = static_cast<T*>(a.dv) + blk.bhk * a.Sk * D;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int key = key_row + rr * 8;
    if (key >= a.Sk) continue;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const i64 off = static_cast<i64>(key) * D + n * 8 + 2 * blk.c;
      *reinterpret_cast<uint32_t*>(g_dk + off) =
          klab::pack_pair<T>(r_dk[n][2 * rr] * a.scale, r_dk[n][2 * rr + 1] * a.scale);
      *reinterpret_cast<uint32_t*>(g_dv + off) = klab::pack_pair<T>(r_dv[n][2 * rr], r_dv[n][2 * rr + 1]);
    }
  }
}

// ============================================================================================
// The launchers' pieces
// ============================================================================================

// The workspace: dQ's fp32 accumulator (v1 and the exercise), then D and L in base 2, one
// float a query row each.
inline std::size_t workspace_floats(const klab::Problem& p, bool atomic_dq) {
  const Shape s = shape_of(p);
  const i64 rows = s.B * s.Hq * s.Sq;
  return static_cast<std::size_t>((atomic_dq ? rows * s.d : 0) + 2 * rows);
}

inline BwdArgs bwd_args(const klab::Launch& l, bool atomic_dq) {
  const Shape s = shape_of(l.problem);
  const i64 rows = s.B * s.Hq * s.Sq;
  float* ws = static_cast<float*>(l.workspace);
  float* dq_acc = atomic_dq ? ws : nullptr;
  float* delta = ws + (atomic_dq ? rows * s.d : 0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  return {l.in[0].data, l.in[1].data, l.in[2].data, l.in[3].data, l.in[4].data, l.in[5].as<float>(),
          l.out[0].data, l.out[1].data, l.out[2].data, dq_acc, delta, delta + rows,
          static_cast<int>(s.B), static_cast<int>(s.Hq), static_cast<int>(s.Hkv), static_cast<int>(s.Sq),
          static_cast<int>(s.Sk), static_cast<int>(s.d), is_causal(l.problem), static_cast<float>(scale),
          static_cast<float>(scale * 1.4426950408889634)};
}

inline std::string supports_bwd(const klab::Problem& p) {
  if (std::string why = klab::require_cc(80); !why.empty()) return why;   // mma.sync bf16, cp.async
  if (std::string why = supports_head_dim(p); !why.empty()) return why;
  const Shape s = shape_of(p);
  if (s.B * s.Hkv * ((s.Sk + 63) / 64) > std::numeric_limits<int>::max() ||
      s.B * s.Hq * ((s.Sq + 63) / 64) > std::numeric_limits<int>::max())
    return "more than 2^31 - 1 blocks of 64 rows";
  return "";
}

// D and L in base 2, then a dK/dV kernel of BwdTiles<D>'s shape (v1's, with or without dQ's
// atomics, or the exercise's).
template <class T, int D>
void launch_dkv(void (*kernel)(BwdArgs), const BwdArgs& a, cudaStream_t stream) {
  using C = BwdTiles<D>;
  const i64 rows = static_cast<i64>(a.B) * a.Hq * a.Sq;
  if (rows > 0)
    attention_bwd_dot_do_o<T, D><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(a, rows);
  const i64 blocks = static_cast<i64>(a.B) * a.Hkv * ((a.Sk + C::kBN - 1) / C::kBN);
  if (blocks == 0) return;
  klab::allow_dynamic_smem(reinterpret_cast<const void*>(kernel), C::kSmemBytes);
  kernel<<<static_cast<unsigned>(blocks), C::kThreads, C::kSmemBytes, stream>>>(a);
}

// dQ from its fp32 accumulator, after a dK/dV kernel that added to it.
template <class T, int D>
void launch_dq_convert(const BwdArgs& a, cudaStream_t stream) {
  const i64 pairs = static_cast<i64>(a.B) * a.Hq * a.Sq * D / 2;
  if (pairs > 0)
    attention_bwd_v1_mma_atomic_dq_convert<T>
        <<<static_cast<unsigned>((pairs + 255) / 256), 256, 0, stream>>>(a, pairs);
}

}  // namespace
}  // namespace lesson09
