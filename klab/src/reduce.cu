// klab/src/reduce.cu — sum_partial_rows (klab/reduce.hpp).
#include <cuda_runtime.h>

#include <cstdint>

#include "klab/error.hpp"
#include "klab/math.hpp"
#include "klab/reduce.hpp"

namespace klab {
namespace {

// Block (32, 32) over 32 columns: thread (tx, ty) adds partial rows ty, ty + 32, ... of
// column 32·bx + tx (the 32 threads of a row of the block read 128 contiguous bytes), then
// warp 0 adds the 32 results of each column in order ty = 0, 1, ..., 31.
__global__ void __launch_bounds__(1024)
sum_partial_rows_kernel(const float* __restrict__ part, std::int64_t parts, std::int64_t cols, float* __restrict__ out) {
  __shared__ float s_sum[32][33];   // (ty, tx), padded: warp 0 reads a column without bank conflicts
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * 32 + tx;
  float s = 0.f;
  if (c < cols)
    for (std::int64_t p = ty; p < parts; p += 32) s += part[p * cols + c];
  s_sum[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && c < cols) {
    float sum = 0.f;
#pragma unroll 8
    for (int k = 0; k < 32; ++k) sum += s_sum[k][tx];
    out[c] = sum;
  }
}

}  // namespace

void sum_partial_rows(const float* part, std::int64_t parts, std::int64_t cols, float* out, cudaStream_t stream) {
  if (cols == 0) return;
  KLAB_REQUIRE(parts >= 0 && cols > 0 && cols <= (std::int64_t{1} << 36), "sum_partial_rows: bad shape");
  sum_partial_rows_kernel<<<static_cast<unsigned>(ceil_div<std::int64_t>(cols, 32)), dim3(32, 32), 0, stream>>>(
      part, parts, cols, out);
  KLAB_CHECK_LAUNCH();
}

}  // namespace klab
