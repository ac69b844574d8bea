// klab/kernels.cuh — the few device-side helpers every lesson shares.
//
// Element types: DType maps to a storage type (float, __half, __nv_bfloat16) and kernels
// compute in float. `dispatch_float` turns the run-time dtype of a Problem into a template
// argument, so a lesson writes each kernel once as a template.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "klab/device.hpp"
#include "klab/dtype.hpp"
#include "klab/error.hpp"
#include "klab/math.hpp"

namespace klab {

template <class T> __device__ __forceinline__ float to_f32(T v);
template <> __device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Calls f.template operator()<T>() with T the storage type of a float dtype.
//   klab::dispatch_float(p.dtype, [&]<class T>() { my_kernel<T><<<g, b, 0, s>>>(...); });
template <class F>
void dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::f32: f.template operator()<float>(); break;
    case DType::f16: f.template operator()<__half>(); break;
    case DType::bf16: f.template operator()<__nv_bfloat16>(); break;
    default: KLAB_REQUIRE(false, "dispatch_float: not a float dtype");
  }
}

// dispatch_float without fp16, for ops that come in fp32 and bf16 only (lessons 04 and 08):
// leaving fp16 out halves the kernels compiled.
template <class F>
void dispatch_f32_bf16(DType t, F&& f) {
  switch (t) {
    case DType::f32: f.template operator()<float>(); break;
    case DType::bf16: f.template operator()<__nv_bfloat16>(); break;
    default: KLAB_REQUIRE(false, "dispatch_f32_bf16: fp32 and bf16 only");
  }
}

// Blocks for a 1D launch over n items with `per_block` items each, capped so that the
// grid's x-dimension stays legal; kernels that cover more than that use a grid-stride loop.
inline unsigned int blocks_for(std::int64_t n, std::int64_t per_block,
                               std::int64_t cap = 2147483647) {
  const std::int64_t b = ceil_div<std::int64_t>(n, per_block);
  return static_cast<unsigned int>(b < 1 ? 1 : (b > cap ? cap : b));
}

// The GPU's SMs; without a GPU (sizes only, e.g. a workspace asked for in CI) the H100's 132.
inline int sm_count() { return device_info().sms > 0 ? device_info().sms : 132; }

// Blocks for a grid-stride loop over work_items, `threads` a block (lesson 01): enough to
// fill every SM per_sm times over (8 x 256 = 2048, an H100 SM's thread limit), never more
// than the work needs.
inline unsigned int grid_stride_blocks(std::int64_t work_items, int threads, int per_sm = 8) {
  return blocks_for(work_items, threads, static_cast<std::int64_t>(sm_count()) * per_sm);
}

}  // namespace klab
