// Fixture for tools/impl_index.py (tests/conventions): a lesson file that registers impls.
//
// Versions (impls of op `demo`):
//   cpu            one host thread
//   v1_naive       one element per thread
//   v2_tiled       two kernels: a tile pass and an add pass
//   v4_no_symbol   named here and in the README, but no kernel or launcher carries it
//   v5_no_readme   named here, has a kernel, but the README has no heading for it
//   cublas         the vendor's, needs no kernel
//   cudnn          the vendor's, named here and in the README, with no symbol at all
//   v7_aside       the README names it only in a code fence and in prose
#include "demo.cuh"

namespace lesson01 {
namespace {

// A comment that mentions __global__ void demo_v6_header_only() must not count as a kernel.
const char* note = "__global__ void demo_v6_header_only(";

template <int kBlock>
__global__ void __launch_bounds__(kBlock) demo_v1_naive(const float* g_x, float* g_y, long n) {}

__global__ void demo_v2_tiled_tile(const float* g_x, float* g_y, long n) {}
__global__ void demo_v2_tiled_add(float* g_y, long n) {}

__global__ void demo_v5_no_readme(float* g_y, long n) {}

__global__ void demo_v7_aside(float* g_y, long n) {}

void run_cpu(const klab::Launch& l) {}
void run_v1_naive(const klab::Launch& l) { demo_v1_naive<256><<<1, 1>>>(nullptr, nullptr, 0); }
void run_v2_tiled(const klab::Launch& l) {}
// A call is no definition: this names v4_no_symbol only where it is used.
void run_other(const klab::Launch& l) { run_v4_no_symbol_elsewhere(l); }
void run_v5_no_readme(const klab::Launch& l) {}
void run_cublas(const klab::Launch& l) {}

}  // namespace
}  // namespace lesson01
