#include "klab/tensor.hpp"

#include <cuda_runtime_api.h>

#include <cstring>
#include <utility>

#include "klab/error.hpp"
#include "klab/rng.hpp"

namespace klab {

std::int64_t numel_of(const Dims& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

Dims contiguous_strides(const Dims& shape) {
  Dims s(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

std::string dims_to_string(const Dims& d) {
  std::string out;
  for (std::size_t i = 0; i < d.size(); ++i) {
    if (i) out += "x";
    out += std::to_string(d[i]);
  }
  return out.empty() ? "scalar" : out;
}

static TensorView make_view(void* data, DType t, Dims shape) {
  TensorView v;
  v.data = data;
  v.dtype = t;
  v.strides = contiguous_strides(shape);
  v.shape = std::move(shape);
  return v;
}

void zero_bytes_parallel(void* p, std::size_t bytes) {
  auto* base = static_cast<std::byte*>(p);
  parallel_for(static_cast<std::int64_t>(bytes), [base](std::int64_t b, std::int64_t e) {
    std::memset(base + b, 0, static_cast<std::size_t>(e - b));
  });
}

HostTensor::HostTensor(DType t, Dims shape) {
  for (auto d : shape) KLAB_REQUIRE(d >= 0, "tensor dimension < 0");
  bytes_.resize(static_cast<std::size_t>(numel_of(shape)) * dtype_size(t));
  zero_bytes_parallel(bytes_.data(), bytes_.size());
  view_ = make_view(bytes_.data(), t, std::move(shape));
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes) KLAB_CHECK_CUDA(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

DeviceTensor::DeviceTensor(DType t, Dims shape) {
  for (auto d : shape) KLAB_REQUIRE(d >= 0, "tensor dimension < 0");
  buf_ = DeviceBuffer(static_cast<std::size_t>(numel_of(shape)) * dtype_size(t));
  view_ = make_view(buf_.get(), t, std::move(shape));
}

DeviceTensor to_device(const HostTensor& h) {
  DeviceTensor d(h.dtype(), h.shape());
  if (h.bytes()) KLAB_CHECK_CUDA(cudaMemcpy(d.data(), h.data(), h.bytes(), cudaMemcpyHostToDevice));
  return d;
}

void copy_to_host(const DeviceTensor& d, HostTensor& h) {
  KLAB_REQUIRE(d.bytes() == h.bytes() && d.view().dtype == h.dtype(), "copy_to_host: mismatched tensors");
  if (h.bytes()) KLAB_CHECK_CUDA(cudaMemcpy(h.data(), d.data(), h.bytes(), cudaMemcpyDeviceToHost));
}

void poison(const DeviceTensor& d, cudaStream_t s, unsigned char pattern) {
  // On the launch stream: a cudaMemset on the legacy default stream does not order against
  // a non-blocking launch stream, and the impl could then run before the poison lands.
  if (d.bytes()) KLAB_CHECK_CUDA(cudaMemsetAsync(d.data(), pattern, d.bytes(), s));
}

void poison(HostTensor& h, unsigned char pattern) {
  if (h.bytes()) std::memset(h.data(), pattern, h.bytes());
}

}  // namespace klab
