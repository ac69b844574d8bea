// Lesson 02 exercise — the shared-memory tiled transpose.
//
// Impl registered here (op `transpose`, f32 and bf16):
//   exercise         your shared-memory tiled transpose, timed against v2_smem_tile
//
// y (cols x rows) = x (rows x cols)^T, row-major, f32 and bf16. Make both global sides
// coalesced by staging a 32x32 tile in shared memory:
//
//   1. Each block of 32x8 threads owns the tile whose top-left corner in x is
//      (r0, c0) = (tile row * 32, blockIdx.x * 32). Thread (tx, ty) loads
//      x[r0 + ty + 8k][c0 + tx] for k = 0..3 into s_tile[ty + 8k][tx]: a warp reads 32
//      neighbours of one row of x (coalesced).
//   2. __syncthreads(): the whole tile must be in shared memory before anyone reads it.
//   3. Thread (tx, ty) writes y[c0 + ty + 8k][r0 + tx] = s_tile[tx][ty + 8k]: a warp now
//      writes 32 neighbours of one row of y (coalesced), reading a column of the tile.
//   4. __syncthreads() again before the tile is reused for the next row tile.
//
// Bounds: rows and cols need not be multiples of 32 (try 7 x 127). Guard the load with
// r < rows && c < cols and the store with the same test in y's coordinates.
// Indices: rows * cols may pass 2^31; compute flat indices in std::int64_t.
// Bonus: declare the tile [32][33] instead of [32][32] and explain with the README why
// it is faster (bank conflicts).
//
// Check:  klab check 02      (correctness on unseen seeds and edge shapes, then speed
//                             against v2_smem_tile)
#include <cuda_runtime.h>

#include <cstdint>

#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace {

constexpr int kTile = 32;
// The most blocks down the rows (run_exercise): from 65 row tiles on, a block loops.
constexpr std::int64_t kRowBlocks = 64;

// W is the element's storage word: std::uint32_t for f32, std::uint16_t for bf16.
template <class W>
__global__ void transpose_exercise(const W* __restrict__ g_x, W* __restrict__ g_y, std::int64_t rows,
                                   std::int64_t cols) {
  // TODO 0: declare the shared-memory tile, e.g. __shared__ W s_tile[kTile][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  const std::int64_t tiles_r = klab::ceil_div<std::int64_t>(rows, kTile);
  // gridDim.y is capped at kRowBlocks, so a block loops over row tiles.
  for (std::int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
    const std::int64_t r0 = tr * kTile;
    // TODO 1: load the tile (4 rows per thread: k = ty, ty + 8, ty + 16, ty + 24).
    // TODO 2: barrier.
    // TODO 3: store the transposed tile into y.
    // TODO 4: barrier.
    (void)g_x, (void)g_y, (void)tx, (void)ty, (void)c0, (void)r0, (void)cols;
    // end of TODO 4
  }
}

void run_exercise(const klab::Launch& l) {
  const std::int64_t rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0 || cols == 0) return;
  const dim3 block(kTile, 8);
  // Far below gridDim.y's limit of 65535 so that small shapes (4097 x 3: 129 row tiles)
  // loop too, where compute-sanitizer's racecheck can afford to look for the race of a
  // missing second barrier (TODO 4); 64 x ceil(cols / 32) blocks still fill the GPU at the
  // bench shapes (8192 x 8192: 16,384 blocks of 4 row tiles each).
  const std::int64_t gy = klab::ceil_div<std::int64_t>(rows, kTile);
  const dim3 grid(static_cast<unsigned>(klab::ceil_div<std::int64_t>(cols, kTile)),
                  static_cast<unsigned>(gy > kRowBlocks ? kRowBlocks : gy));
  if (klab::dtype_size(l.problem.dtype) == 4)
    transpose_exercise<std::uint32_t><<<grid, block, 0, l.stream>>>(
        l.in[0].as<std::uint32_t>(), l.out[0].as<std::uint32_t>(), rows, cols);
  else
    transpose_exercise<std::uint16_t><<<grid, block, 0, l.stream>>>(
        l.in[0].as<std::uint16_t>(), l.out[0].as<std::uint16_t>(), rows, cols);
  KLAB_CHECK_LAUNCH();
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "transpose", .name = "exercise",
                                   .summary = "your shared-memory tiled transpose (exercise.cu)",
                                   .kind = klab::ImplKind::exercise, .run = run_exercise}));
