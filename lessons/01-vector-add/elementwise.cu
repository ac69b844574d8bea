// Lesson 01 — the element-wise family: once vector add runs at the copy bandwidth, every
// element-wise op is the same kernel with a different line in the middle. Here that line
// is a functor, and one templated kernel per technique serves them all.
//
// Ops (f32 and bf16): scale y = a*x, maximum max(x, y), relu, sigmoid, gelu (tanh form),
// sub x - y, mul x * y. Impls of each: cpu, v2_grid_stride, v3_vec16 (the same
// techniques as vector_add.cu); gelu also has `triton`.
//
//   klab test 01 --op gelu       klab bench 01 --op gelu,relu --dtype bf16
#include <cuda_runtime.h>

#include <cmath>

#include "elementwise.cuh"
#include "klab/triton.hpp"
#if KLAB_HAVE_TRITON
#include "vector_add_triton.h"
#endif

namespace lesson01 {

// ---- the ops as functors (device) and as fp64 formulas (reference) --------------------------
// Each functor computes in float on values widened from the storage type.

struct Scale { float a; static constexpr int arity = 1; __device__ float operator()(float x, float) const { return a * x; } };
struct Maximum { static constexpr int arity = 2; __device__ float operator()(float x, float y) const { return fmaxf(x, y); } };
struct Relu { static constexpr int arity = 1; __device__ float operator()(float x, float) const { return fmaxf(x, 0.0f); } };
struct Sigmoid {
  static constexpr int arity = 1;
  // expf, not __expf: the fast intrinsic is off by more than the f32 tolerance for large |x|
  // (lesson 14 measures that trade).
  __device__ float operator()(float x, float) const { return 1.0f / (1.0f + expf(-x)); }
};
struct Gelu {
  static constexpr int arity = 1;
  // gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  __device__ float operator()(float x, float) const {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
  }
};
struct Sub { static constexpr int arity = 2; __device__ float operator()(float x, float y) const { return x - y; } };
struct Mul { static constexpr int arity = 2; __device__ float operator()(float x, float y) const { return x * y; } };

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

// ---- kernels: the techniques of vector_add.cu, with the operation as a parameter --------------

template <class T, class F>
__global__ void map_v2_grid_stride(const T* __restrict__ g_x, const T* __restrict__ g_y, T* __restrict__ g_z,
                                   std::int64_t n, F f) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float y = F::arity == 2 ? klab::to_f32(g_y[i]) : 0.0f;   // unary ops never read y
    g_z[i] = klab::from_f32<T>(f(klab::to_f32(g_x[i]), y));
  }
}

template <class T, class F>
__global__ void map_v3_vec16(const T* __restrict__ g_x, const T* __restrict__ g_y, T* __restrict__ g_z,
                             std::int64_t n, F f) {
  constexpr int kVec = 16 / sizeof(T);
  const std::int64_t n_vec = n / kVec;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::int64_t v = tid; v < n_vec; v += stride) {
    const uint4 r_x = reinterpret_cast<const uint4*>(g_x)[v];
    uint4 r_y{};
    if constexpr (F::arity == 2) r_y = reinterpret_cast<const uint4*>(g_y)[v];
    uint4 r_z;
    const T* x = reinterpret_cast<const T*>(&r_x);
    const T* y = reinterpret_cast<const T*>(&r_y);
    T* z = reinterpret_cast<T*>(&r_z);
#pragma unroll
    for (int k = 0; k < kVec; ++k) z[k] = klab::from_f32<T>(f(klab::to_f32(x[k]), F::arity == 2 ? klab::to_f32(y[k]) : 0.0f));
    reinterpret_cast<uint4*>(g_z)[v] = r_z;
  }
  for (std::int64_t i = n_vec * kVec + tid; i < n; i += stride)
    g_z[i] = klab::from_f32<T>(f(klab::to_f32(g_x[i]), F::arity == 2 ? klab::to_f32(g_y[i]) : 0.0f));
}

// ---- launchers ---------------------------------------------------------------------------------

// Builds the functor for a launch (Scale takes its factor from the op's scalars).
template <class F> F make_functor(const klab::Launch&) { return F{}; }
template <> Scale make_functor<Scale>(const klab::Launch& l) { return Scale{static_cast<float>(l.scalars.at(0))}; }

template <class F, bool kVector>
void launch_map(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return;
  const F f = make_functor<F>(l);
  klab::dispatch_float(l.problem.dtype, [&]<class T>() {
    const T* x = l.in[0].as<const T>();
    const T* y = F::arity == 2 ? l.in[1].as<const T>() : nullptr;
    T* z = l.out[0].as<T>();
    if constexpr (kVector)
      map_v3_vec16<T, F><<<grid_stride_blocks(klab::ceil_div<std::int64_t>(n, 16 / sizeof(T))), kThreads, 0, l.stream>>>(x, y, z, n, f);
    else
      map_v2_grid_stride<T, F><<<grid_stride_blocks(n), kThreads, 0, l.stream>>>(x, y, z, n, f);
  });
}

// The CPU impl: one host thread, float arithmetic like the kernels (not the fp64
// reference); f32 only (cpu_supports).
template <class HostF>
std::function<void(const klab::Launch&)> cpu_map(int arity, HostF f) {
  return [arity, f](const klab::Launch& l) {
    const std::int64_t n = l.problem.shape[0];
    const float a = l.scalars.empty() ? 0.0f : static_cast<float>(l.scalars[0]);
    const float* x = l.in[0].as<const float>();
    const float* y = arity == 2 ? l.in[1].as<const float>() : nullptr;
    float* z = l.out[0].as<float>();
    for (std::int64_t i = 0; i < n; ++i) z[i] = f(x[i], y ? y[i] : 0.0f, a);
  };
}

void run_triton_gelu(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return;
  klab::triton_prepare();
  const auto x = reinterpret_cast<CUdeviceptr>(l.in[0].data);
  const auto z = reinterpret_cast<CUdeviceptr>(l.out[0].data);
  if (l.problem.dtype == klab::DType::f32) KLAB_CHECK_CU(tr_gelu_f32_default(l.stream, x, z, n));
  else KLAB_CHECK_CU(tr_gelu_bf16_default(l.stream, x, z, n));
#else
  (void)l;
#endif
}

// ---- registration ------------------------------------------------------------------------------

template <class F, class HostF>
bool register_family(klab::Op op, HostF host_f) {
  const int arity = F::arity;
  const std::string name = op.name;
  klab::register_op(std::move(op));
  klab::register_impl({name, "cpu", "one host thread, a plain loop", klab::ImplKind::cpu, cpu_supports, {}, cpu_map(arity, host_f)});
  klab::register_impl({name, "v2_grid_stride", "grid-stride loop, one element per iteration", klab::ImplKind::cuda, {}, {},
                       launch_map<F, false>});
  klab::register_impl({name, "v3_vec16", "grid-stride with 16-byte vector loads/stores", klab::ImplKind::cuda, {}, {},
                       launch_map<F, true>});
  return true;
}

// Inputs over a range wide enough to reach the saturated tails of sigmoid and gelu.
void wide_inputs(const klab::Problem&, std::uint64_t seed, klab::Inputs& in) {
  klab::fill_uniform(in.tensors[0], klab::derive_seed(seed, 0), -8.0, 8.0);
}

KLAB_REGISTER((register_family<Scale>(
    [] {
      auto op = elementwise_op("scale", "y = a * x (a drawn from the seed)", 1, nullptr);
      op.generate = [](const klab::Problem&, std::uint64_t seed, klab::Inputs& in) {
        klab::fill_uniform(in.tensors[0], klab::derive_seed(seed, 0), -1.0, 1.0);
        // a is passed to kernels as a float: the reference uses the same rounded value.
        in.scalars = {static_cast<double>(static_cast<float>(-2.0 + 4.0 * klab::uniform01(seed, 7)))};
      };
      op.reference = [](const klab::Problem&, const klab::Inputs& in) {
        const double a = in.scalars.at(0);
        return map_reference(in, [a](double x, double) { return a * x; });
      };
      return op;
    }(),
    [](float x, float, float a) { return a * x; })));
KLAB_REGISTER((register_family<Maximum>(elementwise_op("maximum", "z = max(x, y)", 2, [](double x, double y) { return std::max(x, y); }),
                                        [](float x, float y, float) { return std::max(x, y); })));
KLAB_REGISTER((register_family<Relu>(elementwise_op("relu", "y = max(x, 0)", 1, [](double x, double) { return std::max(x, 0.0); }),
                                     [](float x, float, float) { return std::max(x, 0.0f); })));
KLAB_REGISTER((register_family<Sigmoid>(
    [] {
      auto op = elementwise_op("sigmoid", "y = 1 / (1 + exp(-x))", 1, [](double x, double) { return 1.0 / (1.0 + std::exp(-x)); });
      op.generate = wide_inputs;
      return op;
    }(),
    [](float x, float, float) { return 1.0f / (1.0f + std::exp(-x)); })));
KLAB_REGISTER((register_family<Gelu>(
    [] {
      auto op = elementwise_op("gelu", "y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))", 1,
                               [](double x, double) { return gelu_ref(x); });
      op.generate = wide_inputs;
      return op;
    }(),
    [](float x, float, float) { return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x))); })));
KLAB_REGISTER((register_family<Sub>(elementwise_op("sub", "z = x - y", 2, [](double x, double y) { return x - y; }),
                                    [](float x, float y, float) { return x - y; })));
KLAB_REGISTER((register_family<Mul>(elementwise_op("mul", "z = x * y", 2, [](double x, double y) { return x * y; }),
                                    [](float x, float y, float) { return x * y; })));

KLAB_REGISTER(klab::register_impl({"gelu", "triton", "Triton, 4096 elements per program, compiled ahead of time",
                                   klab::ImplKind::triton, [](const klab::Problem&) { return klab::triton_supported(); }, {},
                                   run_triton_gelu}));

}  // namespace lesson01
