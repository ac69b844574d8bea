// lessons/04-softmax/softmax_common.cuh — lesson-wide declarations shared by the op specs
// and the kernel files (namespace lesson04). The device primitives the lesson teaches live in
// the framework: the online-softmax state and its merges in klab/device/online_softmax.cuh,
// warp and block sums in klab/device/warp.cuh and block.cuh, 16-byte vectors in
// klab/device/vec.cuh.
//
// The op's shape is {rows, cols}, row-major. Causal masking is folded into one number per
// launch, `diag`: column j of row r is kept while j <= r + diag, so
//   limit(r) = clamp(r + diag + 1, 0, cols)        columns [0, limit) take part
// with diag = cols - rows for the causal variant (the last row sees every column, as in
// attention with a longer key sequence than query sequence) and diag = cols, which keeps
// everything, otherwise. A row with limit 0 (possible when rows > cols) writes zeros.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace lesson04 {

// The diag of a problem: see the header comment.
inline std::int64_t diag_of(const klab::Problem& p) {
  const std::int64_t rows = p.shape.at(0), cols = p.shape.at(1);
  return p.variant == "causal" ? cols - rows : cols;
}

__host__ __device__ __forceinline__ std::int64_t row_limit(std::int64_t row, std::int64_t cols,
                                                           std::int64_t diag) {
  std::int64_t lim = row + diag + 1;
  return lim < 0 ? 0 : (lim > cols ? cols : lim);
}

// N elements of T as one bundle, one access (klab/device/vec.cuh).
template <class T, int N>
using Vec = klab::Vec<T, N>;

// The lesson's ops come in fp32 and bf16 only (klab/kernels.cuh).
using klab::dispatch_f32_bf16;

// --- launch arguments shared by the softmax_rows launchers -----------------------------------

struct RowArgs {
  const void* x;
  void* y;
  std::int64_t rows, cols, diag;
  cudaStream_t stream;
};

inline RowArgs row_args(const klab::Launch& l) {
  return {l.in[0].data, l.out[0].data, l.problem.shape[0], l.problem.shape[1], diag_of(l.problem),
          l.stream};
}

// Vector width for a launch: 16-byte vectors when every row starts 16-byte aligned.
template <class T>
int vec_for(const RowArgs& a) {
  constexpr int V = klab::kVec16<T>;
  return (a.cols % V == 0 && klab::aligned16(a.x) && klab::aligned16(a.y)) ? V : 1;
}

// --- host helpers shared by the op definitions -----------------------------------------------

// The i-th input tensor, created with the given type and shape unless the harness already
// made it so.
inline klab::HostTensor& input_slot(klab::Inputs& in, std::size_t i, klab::DType t,
                                    const klab::Dims& shape) {
  if (in.tensors.size() <= i) in.tensors.resize(i + 1);
  if (in.tensors[i].shape() != shape || in.tensors[i].dtype() != t) in.tensors[i] = klab::HostTensor(t, shape);
  return in.tensors[i];
}

// The relative bounds of the lesson's row ops (softmax_rows, row_normalize, softmax_bwd): each
// output is a few fp32 operations on a row's sum (u = 2^-24 each, plus the sum's error, which
// grows with the row length: rtol 2e-5 leaves room for 262,144-long rows); bf16 stores the
// fp32 result rounded once (relative error up to 2^-8 = 3.9e-3). The absolute bound is each
// op's own.
inline klab::Tolerance row_tolerance(klab::DType t, double atol) {
  if (t == klab::DType::bf16) return {.atol = atol, .rtol = 8e-3, .max_rel_l2 = 4e-3};
  return {.atol = atol, .rtol = 2e-5, .max_rel_l2 = 1e-5};
}

inline std::string validate_rows_cols(const klab::Problem& p) {
  if (p.shape.size() != 2) return "shape must be {rows, cols}";
  if (p.shape[0] < 0 || p.shape[1] < 0) return "rows and cols must be >= 0";
  if (p.shape[0] > std::numeric_limits<int>::max() || p.shape[1] > std::numeric_limits<int>::max())
    return "rows and cols must each fit in 31 bits (grid size, column index)";
  return "";
}

}  // namespace lesson04
