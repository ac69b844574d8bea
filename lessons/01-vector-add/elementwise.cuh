// Lesson 01 — the lesson-wide pieces of vector_add.cu and elementwise.cu (namespace
// lesson01): the op spec (inputs, fp64 reference, shapes) that every element-wise op
// repeats, where the CPU impl stops, and the launch shape of the grid-stride versions.
// It registers no impl.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "klab/device.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/rng.hpp"

namespace lesson01 {

// Test shapes: empty, one element, odd and prime sizes, sizes that are not a multiple of a
// block (256) or of a vector (4 or 8 elements), and one whose flat index passes 2^31 (the
// int32 overflow that a naive `int i = blockIdx.x * blockDim.x + ...` hits).
// Grid-stride loops (grid_stride_blocks: 8 blocks of 256 per SM, 270,336 threads on 132 SMs)
// run more than once per thread from 1000003 on in v2; v3's vector loop needs n / 4 (f32)
// or n / 8 (f16, bf16) past that: 2^23 + 9 loops it 7+ times in f32 and 3+ in bf16 (the
// 16-bit types never reach the f32-only 2^31 + 7).
inline const std::vector<klab::Dims> kTestShapes = {
    {0}, {1}, {3}, {7}, {127}, {1023}, {4097}, {65537}, {1000003}, {(1 << 23) + 9},
    {(std::int64_t{1} << 31) + 7}};
// The CPU impl is a timing baseline for f32 (the fp64 reference checks the math); above
// this size it reports itself unsupported instead of spending seconds per check.
inline constexpr std::int64_t kCpuMaxElems = std::int64_t{1} << 28;
inline std::string cpu_supports(const klab::Problem& p) {
  if (p.dtype != klab::DType::f32) return "the CPU baseline is f32 (the host has no 16-bit arithmetic)";
  return p.shape[0] > kCpuMaxElems ? std::string("CPU baseline: up to 2^28 elements") : std::string();
}

// Bench: a size the L2 (50 MB) holds, and 2^28 (1 GiB per f32 tensor) where only HBM counts.
inline const std::vector<klab::Dims> kBenchShapes = {{1 << 20}, {1 << 28}};

// Launch shape of the grid-stride versions: 256 threads per block, and enough resident
// blocks to fill every SM several times over (klab::grid_stride_blocks, klab/kernels.cuh),
// never more than the work needs.
inline constexpr int kThreads = 256;
inline unsigned grid_stride_blocks(std::int64_t work_items) { return klab::grid_stride_blocks(work_items, kThreads); }

// The fp64 reference of an element-wise op: ref[i] = f(x[i], y[i]), computed from the
// inputs as stored (already rounded to their dtype), on all host cores.
inline klab::Reference map_reference(const klab::Inputs& in, const std::function<double(double, double)>& f) {
  const auto& x = in.tensors.at(0);
  const klab::HostTensor* y = in.tensors.size() > 1 ? &in.tensors[1] : nullptr;
  klab::RefArray out(static_cast<std::size_t>(x.numel()));
  klab::parallel_for(x.numel(), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) out[static_cast<std::size_t>(i)] = f(x.get(i), y ? y->get(i) : 0.0);
  });
  return klab::single_output(std::move(out));
}

// An element-wise op over n elements with `arity` inputs of the problem's dtype.
inline klab::Op elementwise_op(std::string name, std::string summary, int arity,
                               std::function<double(double, double)> f) {
  klab::Op op;
  op.lesson = "01";
  op.name = std::move(name);
  op.summary = std::move(summary);
  op.dims = {"n"};
  op.dtypes = {klab::DType::f32, klab::DType::bf16};
  op.test_shapes = kTestShapes;
  op.bench_shapes = kBenchShapes;
  op.baseline = "cpu";
  op.tour = {"v3_vec16"};   // the family's best; its first version, v2, is vector_add's too
  op.bound = klab::Bound::memory;
  op.inputs = [arity](const klab::Problem& p) {
    std::vector<klab::TensorSpec> v = {{"x", p.dtype, p.shape}};
    if (arity == 2) v.push_back({"y", p.dtype, p.shape});
    return v;
  };
  op.outputs = [](const klab::Problem& p) { return std::vector<klab::TensorSpec>{{"z", p.dtype, p.shape}}; };
  op.reference = [f](const klab::Problem&, const klab::Inputs& in) { return map_reference(in, f); };
  op.flops = [](const klab::Problem& p) { return static_cast<double>(p.shape[0]); };
  op.validate = [](const klab::Problem& p) {
    if (p.shape[0] < 0) return std::string("n < 0");
    // The index check past 2^31 runs in f32: the index arithmetic is the same template
    // code for every dtype, and each such check moves ~40 GB through host memory.
    if (p.shape[0] > std::numeric_limits<std::int32_t>::max() && p.dtype != klab::DType::f32)
      return std::string("past 2^31 elements: f32 only");
    return std::string();
  };
  return op;
}

}  // namespace lesson01
