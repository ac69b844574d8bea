// klab/device/vec.cuh — 16-byte vectors (taught in lesson 01: one LDG.128/STG.128 moves 16
// bytes, four times what a 4-byte access moves per instruction).
#pragma once

#include <cstdint>

namespace klab {

// N elements of T as one aligned bundle: a load or store of a whole Vec is one vector
// instruction when sizeof(T) * N is 2, 4, 8 or 16 bytes and the address is aligned to it
// (2 bytes: the scalar path of a 16-bit type, one element per access).
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  static_assert(sizeof(T) * N == 2 || sizeof(T) * N == 4 || sizeof(T) * N == 8 || sizeof(T) * N == 16,
                "one access moves 2, 4, 8 or 16 bytes");
  T v[N];
};

// Elements per 16-byte vector: 4 floats, 8 bf16/f16.
template <class T>
inline constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

// Whether p may be read or written 16 bytes at a time.
__host__ __device__ inline bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

}  // namespace klab
