// lessons/08-layernorm/layernorm.cuh — what the layernorm kernels and the op share: the
// launch arguments and the epsilon.
#pragma once

#include <cstdint>

#include "klab/op.hpp"

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

}  // namespace lesson08
