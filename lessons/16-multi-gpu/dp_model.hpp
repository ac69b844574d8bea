// Lesson 16 — the model the data-parallel step trains: its shape, where each parameter lives
// in the flat parameter vector, its hyperparameters, and its fp64 reference (forward and
// backward), shared by the op (dp_step_ops.cu), the impls (dp_step.cu) and the CPU tests.
//
// The model: `blocks` pre-LN MLP blocks of width C on a residual stream, GPT-2's MLP half:
//   h = layernorm(x) · gamma + beta          (C)
//   z = h · W1ᵀ + b1                         (4C)   W1: 4C x C
//   a = gelu(z)                              (4C)   GELU, tanh form
//   x ← x + a · W2ᵀ                          (C)    W2: C x 4C, no bias (below)
// and the loss L = Σ over tokens t of ⟨x_out[t], gy[t]⟩: gy, an input, is the gradient of the
// loss at the last block's output, as a head and a cross-entropy (lesson 11) would hand it
// down. The second layer has no bias: its gradient would be the column sums of the residual
// gradient, which no lesson's kernel computes on its own (linear_dgelu_bgrad sums dz, and
// layernorm_backward sums dh, not dy).
//
// The flat parameter vector holds block 0's tensors, then block 1's, ...; within a block
// gamma, beta, b1, W1, W2, row-major. C a multiple of 8 puts every tensor on a 16-byte
// boundary of the bf16 copy (TMA's condition for W1 and W2). The gradient vector has the same
// layout, and one block's slice of it is the bucket the step all-reduces in one call.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "klab/device/activation.cuh"
#include "klab/op.hpp"
#include "klab/rng.hpp"

namespace lesson16 {

struct DpShape {
  int ranks = 1;
  std::int64_t blocks = 0, tokens = 0, C = 0;   // tokens: a rank's share of the global batch
  std::int64_t H() const { return 4 * C; }
  std::int64_t global_tokens() const { return ranks * tokens; }
};
inline DpShape dp_shape(const klab::Problem& p) {
  return {static_cast<int>(p.shape.at(0)), p.shape.at(1), p.shape.at(2), p.shape.at(3)};
}

// Offsets of one block's tensors inside its slice.
struct BlockLayout {
  std::int64_t gamma, beta, b1, w1, w2, size;
};
inline BlockLayout block_layout(std::int64_t C) {
  const std::int64_t H = 4 * C;
  return {0, C, 2 * C, 2 * C + H, 2 * C + H + H * C, 2 * C + H + 2 * H * C};
}
inline std::int64_t param_count(const DpShape& s) { return s.blocks * block_layout(s.C).size; }

// AdamW's scalars, in lesson 11's order (training.cuh: lr, β1, β2, ε, weight decay, t,
// max_norm): the first step of training (t = 1, moments at zero), PyTorch's betas and ε, and
// GPT-2's weight decay.
inline std::vector<double> dp_adamw_scalars() { return {1e-3, 0.9, 0.999, 1e-8, 0.1, 1.0, 0.0}; }
constexpr double kLnEps = 1e-5;   // lesson 08's layernorm epsilon (layernorm.cuh: kEps)

// The generator's scale of each tensor: weights uniform in ±sqrt(3 / fan_in) (variance
// 1 / fan_in, so that z and a · W2ᵀ keep the size of their inputs), W2 further divided by
// sqrt(blocks) so that the residual stream grows by a constant factor, not with depth;
// gamma near 1, beta and b1 small.
inline double param_init(const BlockLayout& L, std::int64_t C, std::int64_t blocks, std::int64_t i, double u) {
  const double H = 4.0 * static_cast<double>(C), w = 2 * u - 1;   // u in [0, 1)
  if (i < L.beta) return 1.0 + 0.1 * w;
  if (i < L.w1) return 0.1 * w;
  if (i < L.w2) return w * std::sqrt(3.0 / static_cast<double>(C));
  return w * std::sqrt(3.0 / H / static_cast<double>(blocks));
}

// ---- the fp64 reference ---------------------------------------------------------------------
// Forward and backward of the model over N tokens (rows of x and gy, N x C), from parameters
// w (as the forward reads them: the bf16 copy), accumulating the gradient of L into grad
// (param_count elements, the same layout). Returns L.
// `store` is applied to every activation where the kernels store one (identity: the exact
// fp64 answer; the tests pass bf16 rounding to mimic the kernels).
inline double keep_exact(double v) { return v; }
template <class Store = double (*)(double)>
double model_forward_backward(const DpShape& s, const std::vector<double>& w, const double* x_in, const double* gy,
                              std::int64_t N, std::vector<double>& grad, Store store = keep_exact) {
  using i64 = std::int64_t;
  const i64 C = s.C, H = s.H(), B = s.blocks;
  const BlockLayout L = block_layout(C);
  std::vector<std::vector<double>> xs(B + 1), xh(B), rstd(B), z(B), a(B);
  xs[0].assign(x_in, x_in + N * C);
  for (i64 b = 0; b < B; ++b) {
    const double* p = w.data() + b * L.size;
    const std::vector<double>& x = xs[b];
    xh[b].assign(N * C, 0), rstd[b].assign(N, 0), z[b].assign(N * H, 0), a[b].assign(N * H, 0);
    xs[b + 1] = x;
    klab::parallel_for(N, [&](i64 t0, i64 t1) {
      std::vector<double> h(C);
      for (i64 t = t0; t < t1; ++t) {
        double mean = 0, var = 0;
        for (i64 c = 0; c < C; ++c) mean += x[t * C + c];
        mean /= static_cast<double>(C);
        for (i64 c = 0; c < C; ++c) var += (x[t * C + c] - mean) * (x[t * C + c] - mean);
        const double r = 1.0 / std::sqrt(var / static_cast<double>(C) + kLnEps);
        rstd[b][t] = r;
        for (i64 c = 0; c < C; ++c) {
          xh[b][t * C + c] = (x[t * C + c] - mean) * r;
          h[c] = store(xh[b][t * C + c] * p[L.gamma + c] + p[L.beta + c]);
        }
        for (i64 j = 0; j < H; ++j) {
          double acc = p[L.b1 + j];
          for (i64 c = 0; c < C; ++c) acc += h[c] * p[L.w1 + j * C + c];
          z[b][t * H + j] = store(acc);
          a[b][t * H + j] = store(klab::gelu_tanh_ref(z[b][t * H + j]));
        }
        for (i64 c = 0; c < C; ++c) {
          double acc = 0;
          for (i64 j = 0; j < H; ++j) acc += a[b][t * H + j] * p[L.w2 + c * H + j];
          xs[b + 1][t * C + c] = store(xs[b + 1][t * C + c] + store(acc));
        }
      }
    }, C * H);
  }
  double loss = 0;
  for (i64 i = 0; i < N * C; ++i) loss += xs[B][i] * gy[i];

  std::vector<double> g(gy, gy + N * C), dz(N * H), dh(N * C);
  for (i64 b = B - 1; b >= 0; --b) {
    const double* p = w.data() + b * L.size;
    double* G = grad.data() + b * L.size;
    // dz = (g · W2) ⊙ gelu'(z), dh = dz · W1: row by row.
    klab::parallel_for(N, [&](i64 t0, i64 t1) {
      for (i64 t = t0; t < t1; ++t) {
        for (i64 j = 0; j < H; ++j) {
          double acc = 0;
          for (i64 c = 0; c < C; ++c) acc += g[t * C + c] * p[L.w2 + c * H + j];
          dz[t * H + j] = store(acc * klab::gelu_tanh_grad_ref(z[b][t * H + j]));
        }
        for (i64 c = 0; c < C; ++c) {
          double acc = 0;
          for (i64 j = 0; j < H; ++j) acc += dz[t * H + j] * p[L.w1 + j * C + c];
          dh[t * C + c] = store(acc);
        }
      }
    }, C * H);
    // The parameter gradients: sums over the tokens, a row of a weight at a time.
    klab::parallel_for(H, [&](i64 j0, i64 j1) {
      for (i64 j = j0; j < j1; ++j) {
        double db = 0;
        for (i64 t = 0; t < N; ++t) {
          const double d = dz[t * H + j];
          db += d;
          const double* h_t = xh[b].data() + t * C;
          for (i64 c = 0; c < C; ++c) G[L.w1 + j * C + c] += d * store(h_t[c] * p[L.gamma + c] + p[L.beta + c]);
        }
        G[L.b1 + j] += db;
      }
    }, N * C);
    klab::parallel_for(C, [&](i64 c0, i64 c1) {
      for (i64 c = c0; c < c1; ++c) {
        double dg = 0, dbeta = 0;
        for (i64 t = 0; t < N; ++t) {
          const double gc = g[t * C + c];
          for (i64 j = 0; j < H; ++j) G[L.w2 + c * H + j] += gc * a[b][t * H + j];
          dg += dh[t * C + c] * xh[b][t * C + c];
          dbeta += dh[t * C + c];
        }
        G[L.gamma + c] += dg;
        G[L.beta + c] += dbeta;
      }
    }, N * H);
    // The layernorm's backward, and the residual: g ← g + dx.
    klab::parallel_for(N, [&](i64 t0, i64 t1) {
      for (i64 t = t0; t < t1; ++t) {
        double m1 = 0, m2 = 0;
        for (i64 c = 0; c < C; ++c) {
          const double dxh = dh[t * C + c] * p[L.gamma + c];
          m1 += dxh;
          m2 += dxh * xh[b][t * C + c];
        }
        m1 /= static_cast<double>(C), m2 /= static_cast<double>(C);
        for (i64 c = 0; c < C; ++c) {
          const double dxh = dh[t * C + c] * p[L.gamma + c];
          g[t * C + c] = store(g[t * C + c] + store(rstd[b][t] * (dxh - m1 - xh[b][t * C + c] * m2)));
        }
      }
    }, C);
  }
  return loss;
}

// One AdamW step in fp64 (klab/device/adamw.cuh's formula), in place.
inline void adamw_ref(const std::vector<double>& sc, double g, double& p, double& m, double& v) {
  const double lr = sc[0], b1 = sc[1], b2 = sc[2], eps = sc[3], wd = sc[4], t = sc[5];
  p *= 1.0 - lr * wd;
  m = b1 * m + (1.0 - b1) * g;
  v = b2 * v + (1.0 - b2) * g * g;
  const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
  p -= lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
}

}  // namespace lesson16
