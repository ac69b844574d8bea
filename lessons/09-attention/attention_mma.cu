// lessons/09-attention/attention_mma.cu — attention forward on the tensor cores with
// mma.sync: the FlashAttention-2 structure.
//
// Impls registered here (op attention_fwd):
//   v2_mma_sync  a block of 4 warps takes 64 query rows of one (batch, head), 16 a warp; K
//                and V arrive in tiles of 64 keys by cp.async into a two-stage ring (tile
//                t + 1 loads while tile t is computed). S = Q·Kᵀ by mma.sync.m16n8k16 (16-bit
//                operands, fp32 accumulators), Q's and K's fragments read from shared
//                memory by ldmatrix; the online softmax runs on the accumulator fragments
//                (each row's max and sum across the 4 lanes that hold it, in base 2: the
//                scale 1/sqrt(d) and log2(e) folded into one multiply, exp by ex2); P is
//                rounded to bf16/fp16 in registers and is, as it stands, the A operand of
//                P·V (ldmatrix.trans for V). Causal: tiles past the block's last visible key
//                are never loaded, the diagonal tile and the ragged last tile are masked.
//                Grouped-query by head index. Writes O and L = m + ln l.
//
// Why this shape: a warp's 16 rows are exactly one mma's M, so the softmax of a row never
// leaves the 4 lanes of its quad (two shuffles for a max or a sum) and no warp waits for
// another between the two products; the block shares its K/V tiles among 64 rows. The
// accumulator layout of S (mma.cuh: rows g and g + 8, columns 2c and 2c + 1 of each 8-column
// block) is, packed to 16 bits, the A-fragment layout of the next product: P goes from
// registers to the tensor cores without touching shared memory.
//
//   klab test 09 --impl v2_mma_sync
//   klab bench 09 --impl v2_mma_sync --variant causal
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "attention.cuh"
#include "klab/device/cp_async.cuh"
#include "klab/device/mma.cuh"
#include "klab/device/online_softmax.cuh"
#include "klab/device/wgmma.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

// The op (inputs, reference, tolerances, shapes): attention_ops.cu.

namespace lesson09 {
namespace {

using std::uint32_t;

// The block's tiles for head dim D: 64 query rows (4 warps x 16), K/V tiles of 64 keys.
// Shared memory: Q (64, D) once, K and V (64, D) twice (the ring): 40 KB at D = 64, 80 KB at
// D = 128, so two blocks share an SM at D = 128 on the A100 (164 KB) and the H100 (227 KB).
template <int D>
struct V2Tiles {
  static constexpr int kWarps = 4, kThreads = kWarps * 32;
  static constexpr int kBM = 16 * kWarps;   // query rows: one m16 a warp
  static constexpr int kBN = 64;            // keys a tile
  static constexpr int kChunks = D / 8;     // 16-byte chunks in a row of D 16-bit elements
  static constexpr int kRowBytes = D * 2;
  static constexpr int kQBytes = kBM * kRowBytes, kKVBytes = kBN * kRowBytes;
  static constexpr int kSmemBytes = kQBytes + 4 * kKVBytes;   // Q, K[2], V[2]
  static_assert(D % 16 == 0 && kChunks >= 8, "k16 steps; 8 chunks a row for the swizzle");
  static_assert(kBN % 16 == 0, "P's k16 steps");
  static_assert((kBM * kChunks) % kThreads == 0 && (kBN * kChunks) % kThreads == 0,
                "every thread copies the same number of chunks");
};

// ============================================================================================
// v2_mma_sync
// ============================================================================================

// Grid: one block per (64 query rows, batch x head), 1D (B * Hq may pass 65535). Causal
// blocks run in reverse row order: the last rows see the most keys and start first, so the
// short blocks fill the tail of the grid instead of the long ones.
template <class T, int D>
__global__ void __launch_bounds__(V2Tiles<D>::kThreads) attention_fwd_v2_mma_sync(const AttnArgs a, float scale_log2) {
  using C = V2Tiles<D>;
  constexpr int kNS = C::kBN / 8;   // n8 blocks of S (keys)
  constexpr int kNO = D / 8;        // n8 blocks of O (head dim)
  constexpr int kKD = D / 16;       // k16 steps of Q·Kᵀ
  constexpr int kKP = C::kBN / 16;  // k16 steps of P·V
  static_assert(kNS % 2 == 0 && kNO % 2 == 0, "ldmatrix_x4 feeds two n8 blocks");
  extern __shared__ __align__(128) unsigned char s_raw[];
  const uint32_t s_q = klab::smem_u32(s_raw);
  const uint32_t s_k = s_q + C::kQBytes;          // K[stage] at s_k + stage * kKVBytes
  const uint32_t s_v = s_k + 2 * C::kKVBytes;     // V[stage] likewise

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, c = lane % 4;           // fragment row and column pair (mma.cuh)
  const int row_blocks = (a.Sq + C::kBM - 1) / C::kBM;
  const i64 bh = blockIdx.x / row_blocks;
  int rb = blockIdx.x % row_blocks;
  if (a.causal) rb = row_blocks - 1 - rb;
  const int q0 = rb * C::kBM;
  const i64 b = bh / a.Hq, h = bh % a.Hq, hk = h / (a.Hq / a.Hkv);
  const T* g_q = static_cast<const T*>(a.q) + bh * a.Sq * D;                // (Sq, D)
  const T* g_k = static_cast<const T*>(a.k) + (b * a.Hkv + hk) * a.Sk * D;  // (Sk, D)
  const T* g_v = static_cast<const T*>(a.v) + (b * a.Hkv + hk) * a.Sk * D;  // (Sk, D)

  // Keys any row of the block sees: its last row's (visible_keys grows with the row).
  // Causal tiles past them are never loaded: the whole-tile skip.
  const i64 block_keys = visible_keys(min(q0 + C::kBM, a.Sq) - 1, a.Sq, a.Sk, a.causal);
  const int tiles = static_cast<int>((block_keys + C::kBN - 1) / C::kBN);

  // Row state, for rows g and g + 8 of the warp's 16: running max m (base 2, scaled), this
  // thread's part of the sum l (its 2 columns of each n8 block; the quad adds up at the end),
  // and the output rows' fragments.
  const int row0 = q0 + warp * 16 + g;   // rows row0 and row0 + 8
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float r_o[kNO][4];
#pragma unroll
  for (int n = 0; n < kNO; ++n) r_o[n][0] = r_o[n][1] = r_o[n][2] = r_o[n][3] = 0.f;

  if (tiles > 0) {
    copy_tile_async<C::kBM, D, C::kThreads>(s_q, g_q, q0, a.Sq, tid);
    copy_tile_async<C::kBN, D, C::kThreads>(s_k, g_k, 0, a.Sk, tid);
    copy_tile_async<C::kBN, D, C::kThreads>(s_v, g_v, 0, a.Sk, tid);
    klab::cp_async_commit();
  }
  for (int t = 0; t < tiles; ++t) {
    const int stage = t & 1;
    if (t + 1 < tiles) {   // the next tile into the other stage, freed by the last barrier
      const i64 kv1 = static_cast<i64>(t + 1) * C::kBN;
      copy_tile_async<C::kBN, D, C::kThreads>(s_k + (stage ^ 1) * C::kKVBytes, g_k, kv1, a.Sk, tid);
      copy_tile_async<C::kBN, D, C::kThreads>(s_v + (stage ^ 1) * C::kKVBytes, g_v, kv1, a.Sk, tid);
      klab::cp_async_commit();
      klab::cp_async_wait<1>();   // tile t (and Q) landed; t + 1 may still fly
    } else {
      klab::cp_async_wait<0>();
    }
    __syncthreads();
    // S (16 x 64 a warp) = Q · K_tᵀ. K_t is stored (key, d): the "col" B operand as it
    // stands. Matrix i of an x4: keys (n + i / 2) * 8.., chunk 2 kk + i % 2 -> b0, b1 of the
    // n8 blocks n and n + 1.
    const uint32_t s_kt = s_k + stage * C::kKVBytes, s_vt = s_v + stage * C::kKVBytes;
    float r_s[kNS][4];
#pragma unroll
    for (int n = 0; n < kNS; ++n) r_s[n][0] = r_s[n][1] = r_s[n][2] = r_s[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKD; ++kk) {
      // Q's A fragment of step kk: matrix i of the x4 is rows (i % 2) * 8.. of chunk
      // 2 kk + i / 2, so that the 4 registers are a[0..3]. Read from shared memory at every
      // tile rather than held: 4 D / 16 registers kept free for S and O (at D = 128, held
      // fragments pushed the kernel past 255 registers into spills).
      uint32_t r_q[4];
      klab::ldmatrix_x4(r_q, s_q + swz<D>(warp * 16 + (lane / 8 % 2) * 8 + lane % 8, 2 * kk + lane / 16));
#pragma unroll
      for (int n = 0; n < kNS; n += 2) {
        uint32_t r_b[4];
        klab::ldmatrix_x4(r_b, s_kt + swz<D>((n + lane / 16) * 8 + lane % 8, 2 * kk + lane / 8 % 2));
        klab::mma_m16n8k16<T>(r_s[n], r_q, r_b[0], r_b[1]);
        klab::mma_m16n8k16<T>(r_s[n + 1], r_q, r_b[2], r_b[3]);
      }
    }

    // Scale into base 2, and mask: keys past Sk (the ragged last tile: K's zero rows would
    // score 0, not -inf) and, causal, keys past the row's diagonal. Only tiles that reach
    // past Sk or past the block's first row's diagonal need it.
    const i64 kv0 = static_cast<i64>(t) * C::kBN;
    const i64 diag = static_cast<i64>(a.Sk) - a.Sq;   // query i sees key j <= i + diag
    const bool masked = kv0 + C::kBN > a.Sk || (a.causal && kv0 + C::kBN - 1 > q0 + diag);
#pragma unroll
    for (int n = 0; n < kNS; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float s = r_s[n][e] * scale_log2;
        if (masked) {
          const i64 key = kv0 + n * 8 + 2 * c + (e & 1), row = row0 + (e >> 1) * 8;
          if (key >= a.Sk || (a.causal && key > row + diag)) s = -INFINITY;
        }
        r_s[n][e] = s;
      }

    // The online softmax of rows g (e = 0, 1) and g + 8 (e = 2, 3): the tile's max over the
    // quad, the correction 2^(m_old - m_new) for l and O, then p = 2^(s - m_new). A row that
    // has seen no key yet keeps m = -inf; 0 stands in for it in the subtractions, so that
    // -inf - -inf never makes a NaN (p and the correction come out 0).
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kNS; ++n) mx = fmaxf(mx, fmaxf(r_s[n][2 * rr], r_s[n][2 * rr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(klab::kFullMask, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(klab::kFullMask, mx, 2));
      const float m_new = fmaxf(m[rr], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float correction = klab::ex2_approx(m[rr] - m_use);
      m[rr] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < kNS; ++n) {
        r_s[n][2 * rr] = klab::ex2_approx(r_s[n][2 * rr] - m_use);
        r_s[n][2 * rr + 1] = klab::ex2_approx(r_s[n][2 * rr + 1] - m_use);
        sum += r_s[n][2 * rr] + r_s[n][2 * rr + 1];
      }
      l[rr] = l[rr] * correction + sum;
#pragma unroll
      for (int n = 0; n < kNO; ++n) {
        r_o[n][2 * rr] *= correction;
        r_o[n][2 * rr + 1] *= correction;
      }
    }

    // O += P · V_t. P's k16 step kk is S's n8 blocks 2 kk and 2 kk + 1, packed to 16 bits:
    // the A fragment (mma.cuh). V_t is stored (key, d): the B operand is its transpose, so
    // ldmatrix.trans; matrix i of an x4: keys 16 kk + (i % 2) * 8.., chunk n + i / 2 -> b0,
    // b1 of the n8 blocks n and n + 1 of O.
#pragma unroll
    for (int kk = 0; kk < kKP; ++kk) {
      const uint32_t r_p[4] = {klab::pack_pair<T>(r_s[2 * kk][0], r_s[2 * kk][1]),
                               klab::pack_pair<T>(r_s[2 * kk][2], r_s[2 * kk][3]),
                               klab::pack_pair<T>(r_s[2 * kk + 1][0], r_s[2 * kk + 1][1]),
                               klab::pack_pair<T>(r_s[2 * kk + 1][2], r_s[2 * kk + 1][3])};
#pragma unroll
      for (int n = 0; n < kNO; n += 2) {
        uint32_t r_b[4];
        klab::ldmatrix_x4<true>(r_b, s_vt + swz<D>(16 * kk + (lane / 8 % 2) * 8 + lane % 8, n + lane / 16));
        klab::mma_m16n8k16<T>(r_o[n], r_p, r_b[0], r_b[1]);
        klab::mma_m16n8k16<T>(r_o[n + 1], r_p, r_b[2], r_b[3]);
      }
    }
    __syncthreads();   // every warp is done with this stage before tile t + 2 is copied into it
  }

  // O = acc / l and L, by the lesson's one epilogue (attention.cuh).
  store_rows<T, D>(a, bh, row0, c, &r_o[0][0], m, l);
}

// ============================================================================================
// Launchers
// ============================================================================================

std::string supports_v2(const klab::Problem& p) {
  if (std::string why = klab::require_cc(80); !why.empty()) return why;   // mma.sync bf16, cp.async
  if (std::string why = supports_head_dim(p); !why.empty()) return why;
  const Shape s = shape_of(p);
  if (s.B * s.Hq * ((s.Sq + 63) / 64) > std::numeric_limits<int>::max()) return "more than 2^31 - 1 blocks of 64 query rows";
  return "";
}

void run_v2_mma_sync(const klab::Launch& l) {
  const AttnArgs a = attn_args(l);
  const i64 blocks = static_cast<i64>(a.B) * a.Hq * ((a.Sq + 63) / 64);
  if (blocks == 0) return;
  // log2(e) / sqrt(d): scores scaled into base 2 by one multiply, exp by one ex2.
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(a.d)));
  auto go = [&]<class T, int D>() {
    using C = V2Tiles<D>;
    static_assert(C::kBM == 64, "the grid above counts blocks of 64 rows");
    KLAB_CHECK_CUDA(cudaFuncSetAttribute(attention_fwd_v2_mma_sync<T, D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    attention_fwd_v2_mma_sync<T, D>
        <<<static_cast<unsigned>(blocks), C::kThreads, C::kSmemBytes, a.stream>>>(a, scale_log2);
  };
  dispatch_dtype_dim(l.problem, go);
  KLAB_CHECK_LAUNCH();
}

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "attention_fwd", .name = "v2_mma_sync",
                                   .summary = "FlashAttention-2 on mma.sync: 16 query rows a warp, K/V tiles "
                                              "of 64 by cp.async (two stages), the online softmax on the "
                                              "accumulator fragments in base 2, P reused from registers",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v2,
                                   .run = run_v2_mma_sync}));

}  // namespace
}  // namespace lesson09
