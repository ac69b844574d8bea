// Lesson 02 — matrix transpose: y (cols x rows) = x (rows x cols)^T, f32 and bf16.
//
// Impls of op `transpose` registered here:
//   v1_naive         thread per element; reads rows of x (coalesced), writes columns of y
//                    (each lane of a warp writes its own sector: uncoalesced)
//   v2_smem_tile     32x32 tile staged in shared memory: both global sides coalesced, but
//                    the column read of the tile hits one bank 32 times (f32)
//   v3_smem_padded   the same tile with one extra column: [32][33] puts a column's 32
//                    elements in 32 different banks (v2 and v3 share transpose_smem)
//   v4_tile64_ilp    64x64 padded tile, 16 elements per thread, all 16 loads issued before
//                    the first store: more bytes in flight per SM (what HBM needs); bf16
//                    moves 4-byte words (2x2 blocks transposed in registers) through a
//                    128x128 tile (transpose_v4_tile64_ilp_pairs)
//   cublas           cublasSgeam(C = A^T), f32 only: cuBLAS has no bf16 geam
//   triton           transpose_triton.py (tile 64x64, tl.trans)
// (The learner's shared-memory tile, impl `exercise`, is registered by exercise.cu.)
//
// A transpose only moves bits, so the kernels are templates on the element width
// (4 bytes for f32, 2 for bf16), not on the arithmetic type.
//
// Run:  klab test 02 --op transpose
//       klab bench 02 --op transpose      (8192x8192 and 4096x32768, f32 and bf16)
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "klab/cublas.hpp"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "klab/triton.hpp"

#if KLAB_HAVE_TRITON
#include "transpose_triton.h"
#endif

namespace {

using klab::DType;
using klab::Problem;
using klab::TensorSpec;

constexpr int kMaxGridY = 65535;

// ---------------------------------------------------------------------------------------
// The op spec: fp64 reference, shapes, exact tolerance
// ---------------------------------------------------------------------------------------

klab::Reference transpose_ref(const Problem& p, const klab::Inputs& in) {
  const std::int64_t rows = p.shape[0], cols = p.shape[1];
  klab::RefArray y(static_cast<std::size_t>(rows * cols));
  const auto& x = in.tensors[0];
  // In 64 x 64 tiles, each thread a band of rows: a column at a time over all rows misses
  // the cache on every read, and the largest test shape has 2^31 of them.
  constexpr std::int64_t T = 64;
  klab::parallel_for(klab::ceil_div<std::int64_t>(rows, T), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r0 = b * T; r0 < std::min(rows, e * T); r0 += T)
      for (std::int64_t c0 = 0; c0 < cols; c0 += T)
        for (std::int64_t c = c0; c < std::min(cols, c0 + T); ++c)
          for (std::int64_t r = r0; r < std::min(rows, r0 + T); ++r) y[c * rows + r] = x.get(r * cols + c);
  }, T * cols);
  return klab::single_output(std::move(y));
}

klab::Op make_transpose_op() {
  klab::Op op;
  op.lesson = "02";
  op.name = "transpose";
  op.summary = "y = x^T (row-major rows x cols -> cols x rows): shared-memory tiles and bank conflicts";
  op.dims = {"rows", "cols"};
  op.dtypes = {DType::f32, DType::bf16};
  // Empty sides, single rows/columns, primes, and sizes that are multiples of neither 32
  // nor 64 (33, 65, 127, 1023, 4097) so that every version's edge tiles are exercised.
  //   130 x 258        even sides past 128: v4's bf16 word path
  //                    (transpose_v4_tile64_ilp_pairs) on its two whole 128 x 128 tiles,
  //                    the element path on the edge tiles
  //   8388737 x 5      more row tiles than gridDim.y's 65535: every version's row-tile loop
  //                    runs at least 4 times (32-row tiles), twice (64 rows: v4 f32) or
  //                    twice on blocks 0-2 (128 rows: v4 bf16); Triton says unsupported
  //   8388738 x 258    2,164,294,404 elements: flat indices past 2^31, and the word path of
  //                    v4 bf16 inside its row-tile loop (65,538 row tiles of 128)
  op.test_shapes = {{0, 0},   {0, 5},    {5, 0},      {1, 1},      {1, 7},
                    {7, 1},   {7, 127},  {33, 65},    {64, 64},    {127, 1023},
                    {1, 4097}, {4097, 3}, {1023, 4097}, {130, 258}, {8388737, 5},
                    {8388738, 258}};
  op.bench_shapes = {{8192, 8192}, {4096, 32768}};
  op.baseline = "cublas";
  op.tour = {"v1_naive", "v4_tile64_ilp"};
  op.validate = [](const Problem& p) {
    if (p.shape.size() != 2) return std::string("expects 2 dims: rows cols");
    if (p.shape[0] < 0 || p.shape[1] < 0) return std::string("negative size");
    return std::string();
  };
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", p.dtype, p.shape}}; };
  op.outputs = [](const Problem& p) {
    return std::vector<TensorSpec>{{"y", p.dtype, {p.shape[1], p.shape[0]}}};
  };
  op.reference = transpose_ref;
  op.tolerance = [](const Problem&, int) { return klab::Tolerance{0, 0}; };  // bits are moved, not computed
  return op;
}

// ---------------------------------------------------------------------------------------
// Kernels. Block 32x8 everywhere; blockIdx.x = column tile of x, blockIdx.y loops over
// row tiles (gridDim.y is capped at 65535). W = uint32_t (f32) or uint16_t (bf16).
// ---------------------------------------------------------------------------------------

// v1_naive: tile of 32 columns x 8 rows, one element per thread.
template <class W>
__global__ void transpose_v1_naive(const W* __restrict__ g_x, W* __restrict__ g_y, std::int64_t rows,
                                   std::int64_t cols) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * 32 + threadIdx.x;
  if (c >= cols) return;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * 8 + threadIdx.y; r < rows;
       r += static_cast<std::int64_t>(gridDim.y) * 8)
    g_y[c * rows + r] = g_x[r * cols + c];  // read: lanes contiguous; write: lanes `rows` apart
}

// v2_smem_tile / v3_smem_padded: a TILE x TILE tile through shared memory. PAD = 0 is
// v2_smem_tile, PAD = 1 is v3_smem_padded (their launchers: run_v2_smem_tile, run_v3_smem_padded).
//
//   load : s_tile[ty + 8k][tx] = x[r0 + ty + 8k][c0 + tx]       (row of x -> row of tile)
//   store: y[c0 + ty + 8k][r0 + tx] = s_tile[tx][ty + 8k]       (column of tile -> row of y)
//
// In the store the 32 lanes of a warp read s_tile[0..31][j]: a column. Element (i, j)
// sits in bank (i * (TILE + PAD) + j) % 32 (4-byte words). With PAD = 0 and TILE = 32
// every lane hits bank j: a 32-way conflict, 32 serialized shared-memory transactions.
// With PAD = 1 lane i hits bank (i + j) % 32: all different, one transaction.
template <class W, int TILE, int PAD>
__global__ void transpose_smem(const W* __restrict__ g_x, W* __restrict__ g_y, std::int64_t rows,
                               std::int64_t cols) {
  static_assert(TILE == 32, "one warp-wide row per tile row");
  static_assert(TILE % 8 == 0, "the 8 rows of the 32x8 block step through the tile");
  static_assert(PAD == 0 || PAD == 1, "v2_smem_tile (no pad) or v3_smem_padded (one pad column)");
  __shared__ W s_tile[TILE][TILE + PAD];  // (TILE, TILE + PAD)
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * TILE;
  const std::int64_t tiles_r = klab::ceil_div<std::int64_t>(rows, TILE);
  for (std::int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
    const std::int64_t r0 = tr * TILE;
#pragma unroll
    for (int k = ty; k < TILE; k += 8) {
      const std::int64_t r = r0 + k, c = c0 + tx;
      if (r < rows && c < cols) s_tile[k][tx] = g_x[r * cols + c];
    }
    __syncthreads();  // the whole tile is in shared memory before any column is read
#pragma unroll
    for (int k = ty; k < TILE; k += 8) {
      const std::int64_t yr = c0 + k, yc = r0 + tx;  // row and column of y
      if (yr < cols && yc < rows) g_y[yr * rows + yc] = s_tile[tx][k];
    }
    __syncthreads();  // nobody overwrites the tile (next tr) while others still read it
  }
}

// v4_tile64_ilp: a 64x64 tile, 16 elements per thread. All 16 global loads go into
// registers first, so each thread has 16 independent loads in flight (v3 has 4); then the
// registers go to shared memory, then out. Per SM that is 16 KB (f32) in flight per block
// instead of 4 KB: HBM3 needs tens of KB in flight per SM to reach its bandwidth.
// Padding: one 4-byte word per row (1 f32, 2 bf16) makes the row pitch 65 (f32) or 33
// (bf16) words, odd, so the 32 lanes reading a tile column land in 32 different banks.
// (A 1-element pad with 2-byte elements would give a 32.5-word pitch: 2-way conflicts.)
template <class W>
__global__ void __launch_bounds__(256) transpose_v4_tile64_ilp(const W* __restrict__ g_x, W* __restrict__ g_y,
                                                               std::int64_t rows, std::int64_t cols) {
  constexpr int TILE = 64, PAD = 4 / sizeof(W);
  static_assert(sizeof(W) == 2 || sizeof(W) == 4, "the pad is one 4-byte word");
  static_assert(TILE == 2 * 32 && TILE == 8 * 8, "a 32x8 block covers the tile in 2 column halves x 8 row steps");
  __shared__ W s_tile[TILE][TILE + PAD];  // (64, 64 + PAD)
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * TILE;
  const std::int64_t tiles_r = klab::ceil_div<std::int64_t>(rows, TILE);
  for (std::int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
    const std::int64_t r0 = tr * TILE;
    W r_v[2][8];  // [column half][row step]
    const bool full = (r0 + TILE <= rows) && (c0 + TILE <= cols);
    if (full) {  // interior tiles: no bounds checks in the loop
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int k = 0; k < 8; ++k) r_v[h][k] = g_x[(r0 + ty + 8 * k) * cols + c0 + tx + 32 * h];
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const std::int64_t r = r0 + ty + 8 * k, c = c0 + tx + 32 * h;
          r_v[h][k] = (r < rows && c < cols) ? g_x[r * cols + c] : W(0);
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int k = 0; k < 8; ++k) s_tile[ty + 8 * k][tx + 32 * h] = r_v[h][k];
    __syncthreads();
    if (full) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int k = 0; k < 8; ++k)
          g_y[(c0 + ty + 8 * k) * rows + r0 + tx + 32 * h] = s_tile[tx + 32 * h][ty + 8 * k];
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const std::int64_t yr = c0 + ty + 8 * k, yc = r0 + tx + 32 * h;
          if (yr < cols && yc < rows) g_y[yr * rows + yc] = s_tile[tx + 32 * h][ty + 8 * k];
        }
    }
    __syncthreads();
  }
}

// v4_tile64_ilp for 2-byte elements: global memory is moved as 4-byte words (a warp moves 128 bytes
// per instruction; 2-byte lanes would move 64), 32 words per thread in flight (128 bytes,
// twice the f32 version's), and the 2x2 transposes inside the words are done in registers,
// so shared memory sees only whole words — one store and one load per word, as in f32.
// (A tile of 2-byte elements costs two 2-byte shared stores and two loads per word: the
// HISTORY.md says what that cost in the version before this one.)
//
// The tile is 128 rows x 128 columns of x, so a warp writes 256 contiguous bytes of each
// row of y (64 rows would give 128-byte pieces). Thread (lane, ty) owns row pairs rp and
// column pairs cp (16 combinations) and loads the two words
//   lo = (x[2rp][2cp], x[2rp][2cp+1]),  hi = (x[2rp+1][2cp], x[2rp+1][2cp+1])
// whose transpose is
//   y row 2cp:   (x[2rp][2cp],   x[2rp+1][2cp])   = __byte_perm(lo, hi, 0x5410)
//   y row 2cp+1: (x[2rp][2cp+1], x[2rp+1][2cp+1]) = __byte_perm(lo, hi, 0x7632)
// stored as word rp of row 2cp / 2cp+1 of s_w (128 rows of y, 64 words each, pitch 65). A
// warp's lanes are 16 column pairs x 2 row pairs: word (2cp·65 + rp) -> bank (2cp + rp) %
// 32, all 32 different; the write-out reads rows of s_w across the lanes: conflict-free.
// Words need even rows and cols; otherwise, and on edge tiles, single elements are moved
// through the same shared memory seen as a (128, 129) tile of 2-byte elements.
constexpr int kPairRows = 128, kPairCols = 128;   // the 2-byte tile: (128, 128) of x

__global__ void __launch_bounds__(256) transpose_v4_tile64_ilp_pairs(const std::uint16_t* __restrict__ g_x,
                                                                     std::uint16_t* __restrict__ g_y,
                                                                     std::int64_t rows, std::int64_t cols) {
  constexpr int TR = kPairRows, TC = kPairCols, WP = TR / 2 + 1;      // word pitch 65
  constexpr int RB = TR / 32;                                           // row-pair steps
  static_assert(TC / 2 == 16 * 4, "16 column-pair lanes x 4 steps cover the tile's column pairs");
  static_assert(TR % 64 == 0, "row pairs in steps of 16; the write-out moves 64 rows of x (32 words) per step");
  __shared__ std::uint32_t s_w[TC * WP];                                // (128, 65) words
  static_assert(TR * (TC + 1) * 2 <= sizeof(s_w), "the element view fits");
  std::uint16_t* s_h = reinterpret_cast<std::uint16_t*>(s_w);         // (128, 129) halves
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int cpl = tx % 16, rpl = tx / 16;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * TC;
  const std::int64_t tiles_r = klab::ceil_div<std::int64_t>(rows, TR);
  const bool even = (rows % 2 == 0) && (cols % 2 == 0);
  for (std::int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
    const std::int64_t r0 = tr * TR;
    const bool full = even && (r0 + TR <= rows) && (c0 + TC <= cols);
    if (full) {
      std::uint32_t r_w[RB][4][2];  // [row-pair step b][column-pair step a][lo, hi]: 32 loads first
#pragma unroll
      for (int b = 0; b < RB; ++b)
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int rp = rpl + 2 * ty + 16 * b, cp = cpl + 16 * a;
            r_w[b][a][e] = *reinterpret_cast<const std::uint32_t*>(g_x + (r0 + 2 * rp + e) * cols + c0 + 2 * cp);
          }
#pragma unroll
      for (int b = 0; b < RB; ++b)
#pragma unroll
        for (int a = 0; a < 4; ++a) {
          const int rp = rpl + 2 * ty + 16 * b, cp = cpl + 16 * a;
          s_w[(2 * cp) * WP + rp] = __byte_perm(r_w[b][a][0], r_w[b][a][1], 0x5410);
          s_w[(2 * cp + 1) * WP + rp] = __byte_perm(r_w[b][a][0], r_w[b][a][1], 0x7632);
        }
      __syncthreads();
#pragma unroll
      for (int k = 0; k < TC / 8; ++k)
#pragma unroll
        for (int h = 0; h < TR / 64; ++h) {
          const int j = ty + 8 * k;
          *reinterpret_cast<std::uint32_t*>(g_y + (c0 + j) * rows + r0 + 64 * h + 2 * tx) = s_w[j * WP + 32 * h + tx];
        }
    } else {
#pragma unroll
      for (int h = 0; h < TC / 32; ++h)
#pragma unroll
        for (int k = 0; k < TR / 8; ++k) {
          const std::int64_t r = r0 + ty + 8 * k, c = c0 + tx + 32 * h;
          if (r < rows && c < cols) s_h[(ty + 8 * k) * (TC + 1) + tx + 32 * h] = g_x[r * cols + c];
        }
      __syncthreads();
#pragma unroll
      for (int h = 0; h < TR / 32; ++h)
#pragma unroll
        for (int k = 0; k < TC / 8; ++k) {
          const std::int64_t yr = c0 + ty + 8 * k, yc = r0 + tx + 32 * h;
          if (yr < cols && yc < rows) g_y[yr * rows + yc] = s_h[(tx + 32 * h) * (TC + 1) + ty + 8 * k];
        }
    }
    __syncthreads();  // both branches are uniform across the block: `full` depends on the tile only
  }
}

// ---------------------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------------------

dim3 tile_grid(std::int64_t rows, std::int64_t cols, int tile) {
  const std::int64_t gy = klab::ceil_div<std::int64_t>(rows, tile);
  return dim3(static_cast<unsigned>(klab::ceil_div<std::int64_t>(cols, tile)),
              static_cast<unsigned>(gy > kMaxGridY ? kMaxGridY : gy));
}

// The 2-byte word path's grid: (128, 128) tiles of x, row tiles capped like tile_grid's.
dim3 pair_grid(std::int64_t rows, std::int64_t cols) {
  const std::int64_t gy = klab::ceil_div<std::int64_t>(rows, kPairRows);
  return dim3(static_cast<unsigned>(klab::ceil_div<std::int64_t>(cols, kPairCols)),
              static_cast<unsigned>(gy > kMaxGridY ? kMaxGridY : gy));
}

// Calls f.template operator()<W>() with W the storage word of the dtype.
template <class F>
void dispatch_width(DType t, F&& f) {
  if (klab::dtype_size(t) == 4) f.template operator()<std::uint32_t>();
  else f.template operator()<std::uint16_t>();
}

void run_v1_naive(const klab::Launch& l) {
  const std::int64_t rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0 || cols == 0) return;
  dispatch_width(l.problem.dtype, [&]<class W>() {
    transpose_v1_naive<W><<<tile_grid(rows, cols, 32), dim3(32, 8), 0, l.stream>>>(l.in[0].as<W>(), l.out[0].as<W>(),
                                                                                    rows, cols);
    KLAB_CHECK_LAUNCH();
  });
}

void run_v2_smem_tile(const klab::Launch& l) {
  const std::int64_t rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0 || cols == 0) return;
  dispatch_width(l.problem.dtype, [&]<class W>() {
    transpose_smem<W, 32, 0><<<tile_grid(rows, cols, 32), dim3(32, 8), 0, l.stream>>>(l.in[0].as<W>(),
                                                                                        l.out[0].as<W>(), rows, cols);
    KLAB_CHECK_LAUNCH();
  });
}

void run_v3_smem_padded(const klab::Launch& l) {
  const std::int64_t rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0 || cols == 0) return;
  dispatch_width(l.problem.dtype, [&]<class W>() {
    transpose_smem<W, 32, 1><<<tile_grid(rows, cols, 32), dim3(32, 8), 0, l.stream>>>(l.in[0].as<W>(),
                                                                                        l.out[0].as<W>(), rows, cols);
    KLAB_CHECK_LAUNCH();
  });
}

void run_v4_tile64_ilp(const klab::Launch& l) {
  const std::int64_t rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0 || cols == 0) return;
  dispatch_width(l.problem.dtype, [&]<class W>() {
    const W* x = l.in[0].as<W>();
    W* y = l.out[0].as<W>();
    const dim3 block(32, 8);
    if constexpr (sizeof(W) == 2) {
      // Pairs need 4-byte aligned bases too (cudaMalloc gives 256; a view might not).
      if (reinterpret_cast<std::uintptr_t>(x) % 4 == 0 && reinterpret_cast<std::uintptr_t>(y) % 4 == 0) {
        transpose_v4_tile64_ilp_pairs<<<pair_grid(rows, cols), block, 0, l.stream>>>(x, y, rows, cols);
        KLAB_CHECK_LAUNCH();
        return;
      }
    }
    transpose_v4_tile64_ilp<W><<<tile_grid(rows, cols, 64), block, 0, l.stream>>>(x, y, rows, cols);
    KLAB_CHECK_LAUNCH();
  });
}

// cuBLAS is column-major. Row-major x (rows x cols) is column-major A (cols x rows, lda =
// cols); row-major y (cols x rows) is column-major C (rows x cols, ldc = rows). So
// C = A^T: geam with transa = T, m = rows, n = cols. B is not needed (beta = 0); it is
// passed as A again (with the same transpose) so no uninitialised memory is ever read.
std::string cublas_supports(const Problem& p) {
  if (p.dtype != DType::f32) return "cuBLAS has no bf16 geam (transpose baseline is f32 only)";
  const std::int64_t lim = 2147483647;
  if (p.shape[0] > lim || p.shape[1] > lim) return "cuBLAS dimensions are int";
  return "";
}

void run_cublas(const klab::Launch& l) {
  const std::int64_t rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0 || cols == 0) return;
  cublasHandle_t h = klab::cublas_handle();
  KLAB_CHECK_CUBLAS(cublasSetStream(h, l.stream));
  const float one = 1.0f, zero = 0.0f;
  const float* a = l.in[0].as<float>();
  KLAB_CHECK_CUBLAS(cublasSgeam(h, CUBLAS_OP_T, CUBLAS_OP_T, static_cast<int>(rows), static_cast<int>(cols),
                                &one, a, static_cast<int>(cols), &zero, a, static_cast<int>(cols),
                                l.out[0].as<float>(), static_cast<int>(rows)));
}

std::string triton_supports(const Problem& p) {
  std::string why = klab::triton_supported();
  if (why.empty() && klab::ceil_div<std::int64_t>(p.shape[0], 64) > kMaxGridY)
    why = "more than 65535 row tiles (the Triton grid's y dimension)";
  return why;
}

void run_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  klab::triton_prepare();
  const std::int64_t rows = l.problem.shape[0], cols = l.problem.shape[1];
  const auto x = reinterpret_cast<CUdeviceptr>(l.in[0].data);
  const auto y = reinterpret_cast<CUdeviceptr>(l.out[0].data);
  const auto s = reinterpret_cast<CUstream>(l.stream);
  if (l.problem.dtype == DType::f32) KLAB_CHECK_CU(tr_transpose_f32_default(s, x, y, rows, cols));
  else KLAB_CHECK_CU(tr_transpose_bf16_default(s, x, y, rows, cols));
#else
  (void)l;
  KLAB_REQUIRE(false, "built without Triton");
#endif
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------

KLAB_REGISTER(klab::register_op(make_transpose_op()));
KLAB_REGISTER(klab::register_impl({.op = "transpose", .name = "v1_naive",
                                   .summary = "thread per element: coalesced reads, strided writes",
                                   .kind = klab::ImplKind::cuda, .run = run_v1_naive}));
KLAB_REGISTER(klab::register_impl({.op = "transpose", .name = "v2_smem_tile",
                                   .summary = "32x32 shared-memory tile: both sides coalesced, 32-way bank conflicts",
                                   .kind = klab::ImplKind::cuda, .run = run_v2_smem_tile,
                                   .kernels = {"transpose_smem"}}));
KLAB_REGISTER(klab::register_impl({.op = "transpose", .name = "v3_smem_padded",
                                   .summary = "tile [32][33]: the padding column removes the bank conflicts",
                                   .kind = klab::ImplKind::cuda, .run = run_v3_smem_padded,
                                   .kernels = {"transpose_smem"}}));
KLAB_REGISTER(klab::register_impl({.op = "transpose", .name = "v4_tile64_ilp",
                                   .summary = "64x64 padded tile, 16 loads in flight per thread",
                                   .kind = klab::ImplKind::cuda, .run = run_v4_tile64_ilp}));
KLAB_REGISTER(klab::register_impl({.op = "transpose", .name = "cublas",
                                   .summary = "cublasSgeam with transa = T (f32 only)",
                                   .kind = klab::ImplKind::vendor, .supports = cublas_supports,
                                   .run = run_cublas}));
KLAB_REGISTER(klab::register_impl({.op = "transpose", .name = "triton",
                                   .summary = "Triton: 64x64 tile, tl.trans (transpose_triton.py)",
                                   .kind = klab::ImplKind::triton, .supports = triton_supports,
                                   .run = run_triton}));
