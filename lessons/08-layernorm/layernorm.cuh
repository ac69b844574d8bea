// lessons/08-layernorm/layernorm.cuh — what the layernorm kernels and the op share: the
// launch arguments (forward and backward) and the epsilon.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "klab/compare.hpp"
#include "klab/op.hpp"
#include "klab/tensor.hpp"

namespace lesson08 {

// PyTorch's default: var + eps keeps rstd finite on a constant row.
constexpr float kEps = 1e-5f;

// y = (x - mean) * rstd * gamma + beta over each row of x (rows, cols); mean and rstd (fp32,
// one per row) are saved for the backward pass.
struct LnArgs {
  const void* x;
  const void* gamma;
  const void* beta;
  void* y;
  float* mean;
  float* rstd;
  std::int64_t rows, cols;
};

inline LnArgs ln_args(const klab::Launch& l) {
  return {l.in[0].data,  l.in[1].data,  l.in[2].data,       l.out[0].data, l.out[1].as<float>(),
          l.out[2].as<float>(), l.problem.shape[0], l.problem.shape[1]};
}

// dx, dgamma, dbeta from dy and the forward's saved mean and rstd (layernorm_backward_ops.cu
// has the formulas). dx has the dtype of x; dgamma and dbeta are fp32.
struct LnBwdArgs {
  const void* x;
  const void* gamma;
  const void* dy;
  const float* mean;
  const float* rstd;
  void* dx;
  float* dgamma;
  float* dbeta;
  std::int64_t rows, cols;
};

inline LnBwdArgs ln_bwd_args(const klab::Launch& l) {
  return {l.in[0].data,         l.in[1].data,         l.in[2].data,         l.in[3].as<const float>(),
          l.in[4].as<const float>(), l.out[0].data, l.out[1].as<float>(), l.out[2].as<float>(),
          l.problem.shape[0],   l.problem.shape[1]};
}

// rmsnorm_backward's inputs (x, gamma, dy, rstd) and outputs (dx, dgamma) in the same
// arguments: no mean, no dbeta.
inline LnBwdArgs rms_bwd_args(const klab::Launch& l) {
  return {l.in[0].data, l.in[1].data, l.in[2].data, nullptr, l.in[3].as<const float>(), l.out[0].data,
          l.out[1].as<float>(), nullptr, l.problem.shape[0], l.problem.shape[1]};
}

// From layernorm_ops.cu, for both ops: x as the lesson draws it (a row offset, and the
// row's first two elements at offset +- 0.9: layernorm_ops.cu says why), and the shapes
// both accept.
void fill_layernorm_x(const klab::Problem& p, std::uint64_t seed, klab::HostTensor& x);
// From layernorm_ops.cu, for the references of ops built on the layernorm (layernorm_linear):
// row r's mean and rstd in fp64, two passes over the row of x (rows of `cols`).
void reference_row_stats(const klab::HostTensor& x, std::int64_t r, std::int64_t cols, double& mean, double& rstd);
std::string validate_layernorm_shape(const klab::Problem& p);

// From layernorm_backward_ops.cu, for dropout_residual_layernorm_backward too: the backward's
// inputs x, gamma, dy, mean, rstd (in.tensors[0..4]) as the op draws them, and its fp64
// reference (dx, dgamma, dbeta) from them.
void generate_layernorm_backward(const klab::Problem& p, std::uint64_t seed, klab::Inputs& in);
klab::Reference layernorm_backward_reference(const klab::Problem& p, const klab::Inputs& in);

// From layernorm_ops.cu and layernorm_backward_ops.cu, for rmsnorm's ops too: the test
// shapes (the two files say why each is there), the tolerance of a parameter gradient summed
// over `rows` fp32 terms each at most `term_bound`, and the allowance for dx of a one-column
// row, which is 0 in exact arithmetic (layernorm_backward_ops.cu derives both).
std::vector<klab::Dims> layernorm_test_shapes();
std::vector<klab::Dims> layernorm_backward_test_shapes();
klab::Tolerance column_sum_tolerance(std::int64_t rows, double term_bound);
void allow_zero_dx(klab::Tolerance& t, double atol);

// From layernorm_ops.cu: the layernorm op as it registers it (inputs, outputs, shapes,
// generator, reference, tolerances), for ops built on it (layernorm_gelu_ops.cu).
klab::Op make_layernorm_op();

// From layernorm.cu, for the kernels of other ops that normalize a tensor they wrote
// (residual_layernorm.cu's unfused version): the fastest forward of this lesson for the
// row's width, v2_block_registers up to 32,768 elements, v1_warp_welford past it.
void layernorm_forward(const LnArgs& a, klab::DType dtype, cudaStream_t stream);

// From layernorm_backward.cu, for ops that run the layernorm backward as one step
// (residual_layernorm.cu's unfused backward): the launch's in[0..4] and out[0..2] as
// layernorm_backward's; v2_fused_partials up to 16,384 columns, v1_dx_then_column_sums past
// it; the workspace either needs.
void layernorm_backward(const klab::Launch& l);
std::size_t layernorm_backward_workspace(const klab::Problem& p);

// From layernorm_backward.cu, for the versions beside it (layernorm_backward_ring.cu):
// dgamma[c] and dbeta[c] as the sums of `parts` partial rows (part: dgamma's, then dbeta's,
// each parts x cols); the blocks a persistent fused kernel launches (each takes its share of
// the rows, at most 4 an SM, never more than rows / groups); the workspace for their partials.
void ln_bwd_column_sums(const float* part, int parts, const LnBwdArgs& a, cudaStream_t stream);
int ln_bwd_fused_blocks(const void* kernel, int threads, std::size_t smem, int groups, std::int64_t rows);
std::size_t ln_bwd_partials_workspace(const klab::Problem& p);

}  // namespace lesson08
