// klab/src/checksum.cu — a checksum of a device buffer, for the harness's input-write check.
//
// Inputs are shared by every impl of a problem and are read-only to them. After each launch
// the harness checksums every input and compares with the checksum taken at upload: an impl
// that writes its inputs (by mistake, or to cheat: precompute into the input, scribble a
// scratch value there) fails instead of handing the next impl different data.
//
// The sum over 8-byte words of mix(word, index) mod 2^64: the index is part of the mix, so
// moved or swapped words change it, and a sum (not a chained hash) lets every thread add its
// share in any order.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "klab/error.hpp"
#include "klab/harness.hpp"

namespace klab {
namespace {

__device__ __forceinline__ std::uint64_t mix64(std::uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void checksum_kernel(const std::uint64_t* __restrict__ g_words, std::size_t n_words,
                                const unsigned char* __restrict__ g_tail, int tail_bytes,
                                unsigned long long* g_sum) {
  std::uint64_t acc = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n_words; i += stride)
    acc += mix64(g_words[i] + (i + 1) * 0x9e3779b97f4a7c15ull);
  if (blockIdx.x == 0 && threadIdx.x == 0 && tail_bytes > 0) {
    std::uint64_t w = 0;
    for (int b = 0; b < tail_bytes; ++b) w |= static_cast<std::uint64_t>(g_tail[b]) << (8 * b);
    acc += mix64(w + (n_words + 1) * 0x9e3779b97f4a7c15ull);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(g_sum, static_cast<unsigned long long>(acc));
}

}  // namespace

std::uint64_t device_checksum(const void* p, std::size_t bytes, cudaStream_t s) {
  static unsigned long long* d_sum = nullptr;   // one word, reused; the harness is single-threaded
  if (!d_sum) KLAB_CHECK_CUDA(cudaMalloc(&d_sum, sizeof(unsigned long long)));
  KLAB_CHECK_CUDA(cudaMemsetAsync(d_sum, 0, sizeof(unsigned long long), s));
  // cudaMalloc'd buffers are 256-byte aligned, so the words are aligned.
  const std::size_t n_words = bytes / 8;
  const int tail = static_cast<int>(bytes % 8);
  const auto* base = static_cast<const unsigned char*>(p);
  checksum_kernel<<<264, 256, 0, s>>>(static_cast<const std::uint64_t*>(p), n_words, base + n_words * 8, tail, d_sum);
  KLAB_CHECK_LAUNCH();
  unsigned long long h = 0;
  KLAB_CHECK_CUDA(cudaMemcpyAsync(&h, d_sum, sizeof(h), cudaMemcpyDeviceToHost, s));
  KLAB_CHECK_CUDA(cudaStreamSynchronize(s));
  return static_cast<std::uint64_t>(h) ^ bytes;
}

}  // namespace klab
