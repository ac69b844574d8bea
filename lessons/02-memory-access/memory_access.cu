// Lesson 02 — memory access: coalescing, strides and 2D grids (transpose lives in
// transpose.cu).
//
// Ops and the impls registered here:
//   strided_copy  y[i] = x[i * stride]            the stride sweep: same kernel, stride 1..32
//     v1_naive          one element per thread, grid-stride loop, 64-bit index
//     memcpy2d          cudaMemcpy2DAsync with a source pitch of stride elements (vendor)
//   grayscale     gray = 0.299 r + 0.587 g + 0.114 b over an H x W x 3 (interleaved) image
//     v1_2d_grid        one pixel per thread on a 2D grid of 32x8 blocks
//     v2_flat_vec4      the image as a flat pixel array: 4 pixels per thread, 3 float4 loads
//   matrix_add    C = A + B on row-major rows x cols matrices (f32, bf16)
//     v1_rows_in_x      threadIdx.x walks down a column: neighbouring threads are a row apart
//     v2_cols_in_x      threadIdx.x walks along a row: one warp reads 32 neighbours (coalesced)
//     v3_flat_vec       the matrices as flat arrays, 16-byte loads and stores
//
// Run:  klab test 02            every impl on the edge-case shapes
//       klab bench 02 --op strided_copy     the stride sweep (GB/s counts useful bytes only)
//       klab run 02                         both, a table per op
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/rng.hpp"

namespace {

using klab::DType;
using klab::Dims;
using klab::Problem;
using klab::TensorSpec;

constexpr int kMaxGridY = 65535;  // gridDim.y limit: 2D kernels loop over row tiles beyond it

// ---------------------------------------------------------------------------------------
// The op specs: fp64 references, shapes, inputs
// ---------------------------------------------------------------------------------------

std::string need_rank(const Problem& p, std::size_t rank) {
  if (p.shape.size() != rank) return "expects " + std::to_string(rank) + " dims";
  for (auto d : p.shape)
    if (d < 0) return "negative size";
  return "";
}

klab::Reference strided_copy_ref(const Problem& p, const klab::Inputs& in) {
  const std::int64_t n = p.shape[0], stride = p.shape[1];
  klab::RefArray y(static_cast<std::size_t>(n));
  const auto& x = in.tensors[0];
  for (std::int64_t i = 0; i < n; ++i) y[i] = x.get(i * stride);
  return klab::single_output(std::move(y));
}

klab::Reference grayscale_ref(const Problem& p, const klab::Inputs& in) {
  const std::int64_t pixels = p.shape[0] * p.shape[1];
  klab::RefArray g(static_cast<std::size_t>(pixels));
  const auto& rgb = in.tensors[0];
  klab::parallel_for(pixels, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      g[i] = 0.299 * rgb.get(3 * i) + 0.587 * rgb.get(3 * i + 1) + 0.114 * rgb.get(3 * i + 2);
  });
  return klab::single_output(std::move(g));
}

klab::Reference matrix_add_ref(const Problem& p, const klab::Inputs& in) {
  const std::int64_t n = p.shape[0] * p.shape[1];
  klab::RefArray c(static_cast<std::size_t>(n));
  klab::parallel_for(n, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) c[i] = in.tensors[0].get(i) + in.tensors[1].get(i);
  });
  return klab::single_output(std::move(c));
}

void fill_pixels(const Problem&, std::uint64_t seed, klab::Inputs& in) {
  klab::fill_uniform(in.tensors[0], klab::derive_seed(seed, 0), 0.0, 1.0);  // intensities in [0, 1)
}

klab::Op make_strided_copy_op() {
  klab::Op op;
  op.lesson = "02";
  op.name = "strided_copy";
  op.summary = "y[i] = x[i*stride]: bandwidth as the stride grows (GB/s counts useful bytes)";
  op.dims = {"n", "stride"};
  op.dtypes = {DType::f32};
  // 0, 1, primes; stride 1 (coalesced), 2, odd strides, one past 128 (lanes 516 bytes
  // apart); the last one reads x at indices past 2^31 ((2^26 + 1) * 32 elements of input,
  // 8 GiB) to prove the 64-bit index, and runs v1's grid-stride loop (flat_blocks: 4224
  // blocks of 256) 62 times.
  op.test_shapes = {{0, 1},    {0, 8},     {1, 1},       {1, 32},   {7, 3},
                    {127, 2},  {1023, 32}, {4097, 7},    {100003, 1}, {65537, 16},
                    {1001, 129}, {(std::int64_t{1} << 26) + 1, 32}};
  // The sweep: the same 2^24 useful elements at strides 1..32 (input up to 2 GiB).
  for (std::int64_t s = 1; s <= 32; s *= 2) op.bench_shapes.push_back({std::int64_t{1} << 24, s});
  op.baseline = "memcpy2d";
  op.tour = {"v1_naive"};
  op.validate = [](const Problem& p) {
    std::string why = need_rank(p, 2);
    if (why.empty() && p.shape[1] < 1) why = "stride must be >= 1";
    return why;
  };
  op.inputs = [](const Problem& p) {
    return std::vector<TensorSpec>{{"x", p.dtype, {p.shape[0] * p.shape[1]}}};
  };
  op.outputs = [](const Problem& p) { return std::vector<TensorSpec>{{"y", p.dtype, {p.shape[0]}}}; };
  op.reference = strided_copy_ref;
  // Only the bytes the op needs: n read, n written. The bytes a strided access fetches
  // and throws away are exactly what the sweep shows as lost bandwidth.
  op.bytes = [](const Problem& p) { return 2.0 * static_cast<double>(p.shape[0]) * sizeof(float); };
  return op;
}

klab::Op make_grayscale_op() {
  klab::Op op;
  op.lesson = "02";
  op.name = "grayscale";
  op.summary = "RGB (H x W x 3, interleaved) to luma on a 2D grid";
  op.dims = {"H", "W"};
  op.dtypes = {DType::f32};
  // The last shape: 3 * H * W = 2,148,546,567 input elements, so the RGB index 3 * p passes
  // 2^31; H / 8 = 131,073 row blocks, past the 65535 of gridDim.y, so v1's row loop runs
  // twice; and 1.8e8 pixel quads, so v2's grid-stride loop (4224 blocks) runs many times.
  op.test_shapes = {{0, 0},  {0, 7},     {7, 0},      {1, 1},    {1, 127},
                    {127, 1}, {7, 7},    {33, 17},    {127, 1023}, {1023, 4097},
                    {1048583, 683}};
  op.bench_shapes = {{4096, 4096}, {8192, 8192}};
  op.baseline = "v1_2d_grid";
  op.tour = {"v1_2d_grid", "v2_flat_vec4"};
  op.validate = [](const Problem& p) { return need_rank(p, 2); };
  op.inputs = [](const Problem& p) {
    return std::vector<TensorSpec>{{"rgb", p.dtype, {p.shape[0], p.shape[1], 3}}};
  };
  op.outputs = [](const Problem& p) {
    return std::vector<TensorSpec>{{"gray", p.dtype, {p.shape[0], p.shape[1]}}};
  };
  op.generate = fill_pixels;
  op.reference = grayscale_ref;
  op.flops = [](const Problem& p) { return 5.0 * static_cast<double>(p.shape[0] * p.shape[1]); };
  return op;
}

klab::Op make_matrix_add_op() {
  klab::Op op;
  op.lesson = "02";
  op.name = "matrix_add";
  op.summary = "C = A + B on row-major matrices: which thread gets which element";
  op.dims = {"rows", "cols"};
  op.dtypes = {DType::f32, DType::bf16};
  // Grid loops (gridDim.y is capped at 65535 blocks of 8): v1 walks columns in y, so
  // 3 x 524353 (65,545 column blocks) loops it twice; v2 walks rows in y, so 524353 x 3 does.
  // The last shape has 2,148,546,567 elements (the flat index passes 2^31) and loops v2's
  // rows and v3's grid-stride loop (4224 blocks of 256 16-byte vectors) many times.
  op.test_shapes = {{0, 0},   {0, 5},   {5, 0},     {1, 1},      {1, 4097},
                    {4097, 1}, {7, 127}, {33, 65},  {127, 1023}, {1023, 1025},
                    {3, 524353}, {524353, 3}, {1048583, 2049}};
  op.bench_shapes = {{8192, 8192}, {4096, 32768}};
  op.baseline = "v3_flat_vec";
  op.tour = {"v1_rows_in_x", "v3_flat_vec"};
  op.validate = [](const Problem& p) { return need_rank(p, 2); };
  op.inputs = [](const Problem& p) {
    return std::vector<TensorSpec>{{"A", p.dtype, p.shape}, {"B", p.dtype, p.shape}};
  };
  op.outputs = [](const Problem& p) { return std::vector<TensorSpec>{{"C", p.dtype, p.shape}}; };
  op.reference = matrix_add_ref;
  op.flops = [](const Problem& p) { return static_cast<double>(p.shape[0] * p.shape[1]); };
  return op;
}

// ---------------------------------------------------------------------------------------
// Kernels: strided_copy
// ---------------------------------------------------------------------------------------

// v1_naive: thread i copies x[i * stride]. With stride 1 a warp reads 128 contiguous
// bytes (4 sectors, all used). With stride s the 32 addresses of a warp spread over
// 32 * 4 * s bytes: from s = 8 on every lane lands in its own 32-byte sector and 28 of
// the 32 bytes fetched are thrown away, so useful bandwidth falls to ~1/8 of the copy.
__global__ void strided_copy_v1_naive(const float* __restrict__ g_x, float* __restrict__ g_y,
                                      std::int64_t n, std::int64_t stride) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step)
    g_y[i] = g_x[i * stride];  // i * stride passes 2^31 for large n * stride: 64-bit
}

// ---------------------------------------------------------------------------------------
// Kernels: grayscale
// ---------------------------------------------------------------------------------------

__device__ __forceinline__ float luma(float r, float g, float b) {
  return fmaf(0.299f, r, fmaf(0.587f, g, 0.114f * b));
}

// v1_2d_grid: the image's own 2D index space. threadIdx.x runs along a row so a warp
// reads 32 consecutive pixels = 384 contiguous bytes of RGB (each lane's 3 loads are
// 12 bytes apart; together the 3 loads of a warp use every byte of 12 sectors).
__global__ void grayscale_v1_2d_grid(const float* __restrict__ g_rgb, float* __restrict__ g_gray,
                                     std::int64_t H, std::int64_t W) {
  const std::int64_t x = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (x >= W) return;
  for (std::int64_t y = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; y < H;
       y += static_cast<std::int64_t>(gridDim.y) * blockDim.y) {
    const std::int64_t p = y * W + x;
    g_gray[p] = luma(g_rgb[3 * p], g_rgb[3 * p + 1], g_rgb[3 * p + 2]);
  }
}

// v2_flat_vec4: grayscale does not care about rows, so treat the image as one array of
// pixels. Four pixels are 12 floats = three 16-byte loads (aligned: 4 pixels start at a
// multiple of 48 bytes) and one 16-byte store: 4 memory instructions instead of 16.
__global__ void grayscale_v2_flat_vec4(const float* __restrict__ g_rgb, float* __restrict__ g_gray,
                                       std::int64_t pixels) {
  const std::int64_t quads = pixels / 4;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const float4* g_rgb4 = reinterpret_cast<const float4*>(g_rgb);
  float4* g_gray4 = reinterpret_cast<float4*>(g_gray);
  for (std::int64_t q = tid; q < quads; q += step) {
    const float4 r_a = g_rgb4[3 * q], r_b = g_rgb4[3 * q + 1], r_c = g_rgb4[3 * q + 2];
    // r_a = r0 g0 b0 r1 | r_b = g1 b1 r2 g2 | r_c = b2 r3 g3 b3
    g_gray4[q] = make_float4(luma(r_a.x, r_a.y, r_a.z), luma(r_a.w, r_b.x, r_b.y), luma(r_b.z, r_b.w, r_c.x),
                             luma(r_c.y, r_c.z, r_c.w));
  }
  // The last pixels % 4 pixels, one per thread.
  for (std::int64_t p = quads * 4 + tid; p < pixels; p += step)
    g_gray[p] = luma(g_rgb[3 * p], g_rgb[3 * p + 1], g_rgb[3 * p + 2]);
}

// ---------------------------------------------------------------------------------------
// Kernels: matrix_add
// ---------------------------------------------------------------------------------------

// v1_rows_in_x: the mapping many first attempts use (x = row, y = column). Lanes of a
// warp are `cols` elements apart, so each lane touches its own sector: 32 sectors (1 KB)
// move for 128 bytes used, on every one of the three arrays.
template <class T>
__global__ void matrix_add_v1_rows_in_x(const T* __restrict__ g_a, const T* __restrict__ g_b,
                                        T* __restrict__ g_c, std::int64_t rows, std::int64_t cols) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  for (std::int64_t c = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; c < cols;
       c += static_cast<std::int64_t>(gridDim.y) * blockDim.y) {
    const std::int64_t i = r * cols + c;
    g_c[i] = klab::from_f32<T>(klab::to_f32(g_a[i]) + klab::to_f32(g_b[i]));
  }
}

// v2_cols_in_x: swap the two: x = column. A warp now reads 32 neighbours of one row.
template <class T>
__global__ void matrix_add_v2_cols_in_x(const T* __restrict__ g_a, const T* __restrict__ g_b,
                                        T* __restrict__ g_c, std::int64_t rows, std::int64_t cols) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<std::int64_t>(gridDim.y) * blockDim.y) {
    const std::int64_t i = r * cols + c;
    g_c[i] = klab::from_f32<T>(klab::to_f32(g_a[i]) + klab::to_f32(g_b[i]));
  }
}

// v3_flat_vec: contiguous row-major matrices are one flat array; element-wise work does
// not need the 2D index at all. 16 bytes per load (4 f32 or 8 bf16) per thread, as one
// klab::Vec (klab/device/vec.cuh, the 16-byte bundle of lesson 01).
template <class T>
__global__ void matrix_add_v3_flat_vec(const T* __restrict__ g_a, const T* __restrict__ g_b,
                                       T* __restrict__ g_c, std::int64_t n) {
  constexpr int V = klab::kVec16<T>;  // elements per 16-byte vector
  using Vec = klab::Vec<T, V>;
  static_assert(sizeof(Vec) == 16, "one 16-byte load per vector");
  const std::int64_t nvec = n / V;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::int64_t v = tid; v < nvec; v += step) {
    const Vec r_a = reinterpret_cast<const Vec*>(g_a)[v];
    const Vec r_b = reinterpret_cast<const Vec*>(g_b)[v];
    Vec r_c;
#pragma unroll
    for (int k = 0; k < V; ++k) r_c.v[k] = klab::from_f32<T>(klab::to_f32(r_a.v[k]) + klab::to_f32(r_b.v[k]));
    reinterpret_cast<Vec*>(g_c)[v] = r_c;
  }
  for (std::int64_t i = nvec * V + tid; i < n; i += step)  // the n % V tail
    g_c[i] = klab::from_f32<T>(klab::to_f32(g_a[i]) + klab::to_f32(g_b[i]));
}

// ---------------------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------------------

constexpr int kThreads = 256;
// Grid-stride kernels: enough blocks to fill the GPU many times over, capped so the loop
// (not the grid) covers huge arrays.
unsigned int flat_blocks(std::int64_t work) { return klab::blocks_for(work, kThreads, 132 * 32); }

// grid_2d puts the x extent in gridDim.x, which the kernels do not loop over: fine up to
// (2^31 - 1) * 32 elements, far past any matrix that fits in memory.
dim3 grid_2d(std::int64_t x_extent, std::int64_t y_extent, dim3 block) {
  const std::int64_t gy = klab::ceil_div<std::int64_t>(y_extent, block.y);
  return dim3(static_cast<unsigned>(klab::ceil_div<std::int64_t>(x_extent, block.x)),
              static_cast<unsigned>(gy > kMaxGridY ? kMaxGridY : gy));
}

void run_strided_copy_v1_naive(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0], stride = l.problem.shape[1];
  if (n == 0) return;
  strided_copy_v1_naive<<<flat_blocks(n), kThreads, 0, l.stream>>>(l.in[0].as<float>(), l.out[0].as<float>(),
                                                                    n, stride);
  KLAB_CHECK_LAUNCH();
}

void run_strided_copy_memcpy2d(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0], stride = l.problem.shape[1];
  if (n == 0) return;
  // n rows of one float each; the source rows are `stride` floats apart.
  KLAB_CHECK_CUDA(cudaMemcpy2DAsync(l.out[0].data, sizeof(float), l.in[0].data,
                                    static_cast<std::size_t>(stride) * sizeof(float), sizeof(float),
                                    static_cast<std::size_t>(n), cudaMemcpyDeviceToDevice, l.stream));
}

void run_grayscale_v1_2d_grid(const klab::Launch& l) {
  const std::int64_t H = l.problem.shape[0], W = l.problem.shape[1];
  if (H == 0 || W == 0) return;
  const dim3 block(32, 8);
  grayscale_v1_2d_grid<<<grid_2d(W, H, block), block, 0, l.stream>>>(l.in[0].as<float>(), l.out[0].as<float>(),
                                                                     H, W);
  KLAB_CHECK_LAUNCH();
}

void run_grayscale_v2_flat_vec4(const klab::Launch& l) {
  const std::int64_t pixels = l.problem.shape[0] * l.problem.shape[1];
  if (pixels == 0) return;
  grayscale_v2_flat_vec4<<<flat_blocks(klab::ceil_div<std::int64_t>(pixels, 4)), kThreads, 0, l.stream>>>(
      l.in[0].as<float>(), l.out[0].as<float>(), pixels);
  KLAB_CHECK_LAUNCH();
}

void run_matrix_add_v1_rows_in_x(const klab::Launch& l) {
  const std::int64_t rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0 || cols == 0) return;
  klab::dispatch_float(l.problem.dtype, [&]<class T>() {
    const dim3 block(32, 8);
    matrix_add_v1_rows_in_x<T><<<grid_2d(rows, cols, block), block, 0, l.stream>>>(
        l.in[0].as<T>(), l.in[1].as<T>(), l.out[0].as<T>(), rows, cols);
    KLAB_CHECK_LAUNCH();
  });
}

void run_matrix_add_v2_cols_in_x(const klab::Launch& l) {
  const std::int64_t rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0 || cols == 0) return;
  klab::dispatch_float(l.problem.dtype, [&]<class T>() {
    const dim3 block(32, 8);
    matrix_add_v2_cols_in_x<T><<<grid_2d(cols, rows, block), block, 0, l.stream>>>(
        l.in[0].as<T>(), l.in[1].as<T>(), l.out[0].as<T>(), rows, cols);
    KLAB_CHECK_LAUNCH();
  });
}

void run_matrix_add_v3_flat_vec(const klab::Launch& l) {
  const std::int64_t rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0 || cols == 0) return;
  klab::dispatch_float(l.problem.dtype, [&]<class T>() {
    const std::int64_t n = rows * cols;
    matrix_add_v3_flat_vec<T><<<flat_blocks(klab::ceil_div<std::int64_t>(n, klab::kVec16<T>)), kThreads, 0, l.stream>>>(
        l.in[0].as<T>(), l.in[1].as<T>(), l.out[0].as<T>(), n);
    KLAB_CHECK_LAUNCH();
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------

KLAB_REGISTER(klab::register_lesson({
    .id = "02",
    .slug = "memory-access",
    .title = "Memory access: coalescing, strides, 2D grids, transpose and bank conflicts",
    .exercise_op = "transpose",
    .exercise_reference = "v2_smem_tile",
    .exercise_hint = "lessons/02-memory-access/exercise.cu: the shared-memory tiled transpose",
}));

KLAB_REGISTER(klab::register_op(make_strided_copy_op()));
KLAB_REGISTER(klab::register_impl({.op = "strided_copy", .name = "v1_naive",
                                   .summary = "one element per thread, x[i*stride], 64-bit index",
                                   .kind = klab::ImplKind::cuda, .run = run_strided_copy_v1_naive}));
KLAB_REGISTER(klab::register_impl({.op = "strided_copy", .name = "memcpy2d",
                                   .summary = "cudaMemcpy2DAsync, source pitch = stride * 4 bytes",
                                   .kind = klab::ImplKind::vendor, .run = run_strided_copy_memcpy2d}));

KLAB_REGISTER(klab::register_op(make_grayscale_op()));
KLAB_REGISTER(klab::register_impl({.op = "grayscale", .name = "v1_2d_grid",
                                   .summary = "one pixel per thread, 32x8 blocks on the image's 2D grid",
                                   .kind = klab::ImplKind::cuda, .run = run_grayscale_v1_2d_grid}));
KLAB_REGISTER(klab::register_impl({.op = "grayscale", .name = "v2_flat_vec4",
                                   .summary = "flat pixels, 4 per thread: three float4 loads, one float4 store",
                                   .kind = klab::ImplKind::cuda, .run = run_grayscale_v2_flat_vec4}));

KLAB_REGISTER(klab::register_op(make_matrix_add_op()));
KLAB_REGISTER(klab::register_impl({.op = "matrix_add", .name = "v1_rows_in_x",
                                   .summary = "threadIdx.x along a column: uncoalesced",
                                   .kind = klab::ImplKind::cuda, .run = run_matrix_add_v1_rows_in_x}));
KLAB_REGISTER(klab::register_impl({.op = "matrix_add", .name = "v2_cols_in_x",
                                   .summary = "threadIdx.x along a row: coalesced",
                                   .kind = klab::ImplKind::cuda, .run = run_matrix_add_v2_cols_in_x}));
KLAB_REGISTER(klab::register_impl({.op = "matrix_add", .name = "v3_flat_vec",
                                   .summary = "flat array, 16-byte vector loads and stores",
                                   .kind = klab::ImplKind::cuda, .run = run_matrix_add_v3_flat_vec}));
