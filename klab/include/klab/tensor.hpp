// klab/tensor.hpp — buffers and a small tensor type (dtype, shape, strides).
//
// TensorView is a non-owning view: a pointer, an element type, a shape and strides in
// elements. HostTensor and DeviceTensor own their memory and hand out views. Kernels get
// raw pointers from views (`v.as<float>()`); the harness owns all allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "klab/dtype.hpp"

namespace klab {

using Dims = std::vector<std::int64_t>;

std::int64_t numel_of(const Dims& shape);           // product; 1 for a scalar (empty shape)
Dims contiguous_strides(const Dims& shape);         // row-major, in elements
std::string dims_to_string(const Dims& d);          // "4096x4096"

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Dims shape;
  Dims strides;

  std::int64_t numel() const { return numel_of(shape); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  std::int64_t dim(int i) const { return shape.at(static_cast<std::size_t>(i)); }
  template <class T>
  T* as() const { return static_cast<T*>(data); }
};

// An allocator that leaves new elements uninitialised, so that HostTensor can zero a
// tensor of several GB on all cores instead of in one std::vector constructor.
template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind { using other = DefaultInitAllocator<U>; };
  using std::allocator<T>::allocator;
  template <class U>
  void construct(U* p) noexcept { ::new (static_cast<void*>(p)) U; }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) { ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...); }
};

// Zeroes `bytes` bytes at p on all host cores (a first touch of several GB is page faults
// the kernel serves one at a time per thread: 16 GB on one core costs 10-20 s).
void zero_bytes_parallel(void* p, std::size_t bytes);

// An allocator whose memory arrives zeroed, on all cores, so that value-initialising a vector
// (`RefArray r(n)`) costs no second pass: the elements are already 0.
template <class T>
struct ZeroedAllocator : std::allocator<T> {
  static_assert(std::is_trivially_default_constructible_v<T>, "zero bytes must be a valid T");
  template <class U>
  struct rebind { using other = ZeroedAllocator<U>; };
  ZeroedAllocator() = default;
  template <class U>
  ZeroedAllocator(const ZeroedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    T* p = std::allocator<T>::allocate(n);
    zero_bytes_parallel(p, n * sizeof(T));
    return p;
  }
  template <class U>
  void construct(U* p) noexcept { ::new (static_cast<void*>(p)) U; }   // already zero
  template <class U, class... Args>
  void construct(U* p, Args&&... args) { ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...); }
};

// One fp64 array of a CPU reference: a std::vector<double> whose zeroing runs on all cores
// (a 2^31-element output is 16 GB).
using RefArray = std::vector<double, ZeroedAllocator<double>>;

// Owns host memory, zeroed on creation.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType t, Dims shape);
  DType dtype() const { return view_.dtype; }
  const Dims& shape() const { return view_.shape; }
  std::int64_t numel() const { return view_.numel(); }
  std::size_t bytes() const { return view_.bytes(); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  TensorView view() { return view_; }
  TensorView view() const { return view_; }
  template <class T> T* as() { return reinterpret_cast<T*>(bytes_.data()); }
  template <class T> const T* as() const { return reinterpret_cast<const T*>(bytes_.data()); }
  double get(std::int64_t i) const { return load_as_double(bytes_.data(), view_.dtype, i); }
  void set(std::int64_t i, double v) { store_from_double(bytes_.data(), view_.dtype, i, v); }

 private:
  std::vector<std::byte, DefaultInitAllocator<std::byte>> bytes_;
  TensorView view_;
};

// Owns device memory (cudaMalloc). Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  std::size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(DType t, Dims shape);
  TensorView view() const { return view_; }
  std::int64_t numel() const { return view_.numel(); }
  std::size_t bytes() const { return view_.bytes(); }
  void* data() const { return buf_.get(); }

 private:
  DeviceBuffer buf_;
  TensorView view_;
};

DeviceTensor to_device(const HostTensor& h);
void copy_to_host(const DeviceTensor& d, HostTensor& h);   // shapes and dtypes must match
// Fill every byte with `pattern` so that an element the kernel never writes cannot pass the
// comparison by luck. The default, 0xFF, is NaN in f32/f16/bf16, -1 in i32 and 255 in u8;
// where a legal answer equals it (argmax of nothing is -1, a mean of nothing NaN) the
// harness picks another pattern per output (harness.cpp, "poison").
void poison(const DeviceTensor& d, cudaStream_t s, unsigned char pattern = 0xFF);  // on s, the launch stream
void poison(HostTensor& h, unsigned char pattern = 0xFF);

}  // namespace klab
