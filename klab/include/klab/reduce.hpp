// klab/reduce.hpp — the second step of a column reduction, for kernels that sum over rows
// in two steps: each block of the first kernel writes one partial row (its rows' column
// sums), and sum_partial_rows adds the partial rows up. Lesson 06's bias gradient uses it
// (linear_backward.cu); lesson 08 taught the pattern for dγ and dβ.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace klab {

// out[c] = Σ_{p < parts} part[p · cols + c] for every c < cols, in fp32 and in a fixed order,
// the same bits every run. parts = 0 writes zeros. One launch on `stream`: blocks of 32
// columns by 32 threads down the partial rows (klab/src/reduce.cu).
void sum_partial_rows(const float* part, std::int64_t parts, std::int64_t cols, float* out, cudaStream_t stream);

}  // namespace klab
