// lessons/09-attention/attention_materialized.cu — the textbook attention that materializes
// the scores: the baseline every fused version of this lesson is measured against.
//
// Impls registered here (op attention_fwd):
//   v0_materialized_scores  three kernels, S and P in global memory between them:
//     1. S = Q·Kᵀ        cuBLAS (cublasGemmStridedBatchedEx): bf16/fp16 in, fp32 compute,
//                        fp32 S out, B · Hq · Sq · Sk floats in the harness's workspace;
//     2. row softmax     ours (attention_fwd_v0_materialized_scores_softmax): one block a
//                        query row, the scale 1/sqrt(d) and the causal mask (bottom-right,
//                        attention.cuh) applied here, the row's max and sum by lesson 04's
//                        online-softmax state (klab::MD, block_merge), then P = exp(s - m) / l
//                        written as 16-bit (the input dtype) in place over S's row, and
//                        L = m + ln l; a row that sees no key gets an all-zero P row and -inf;
//     3. O = P·V         cuBLAS again: 16-bit P and V in, fp32 compute, 16-bit O out.
//
// Grouped-query without copying K or V: the G = Hq / Hkv query heads that share K/V head hk
// are contiguous in Q ((B, Hq, Sq, d): heads hk G ... hk G + G - 1 of batch b follow each
// other), so they are one row-major (G Sq, d) matrix, and each of the B Hkv batch entries of
// both products is one K/V head against its G Sq query rows. S, P and L then come out in the
// flat query-row order r = (b Hq + h) Sq + i of O and L.
//
// P in place: an fp32 row of Sk scores is 4 Sk bytes, room for two 16-bit rows. Row r's P
// takes the first 2 Sk bytes of S's row r, so P is a (rows, Sk) 16-bit matrix with a leading
// dimension of 2 Sk elements, which cuBLAS reads as it stands, and the workspace holds S
// alone: a third less than S and P side by side. The softmax kernel writes a row's P chunk
// by chunk after reading it (below, why that never overwrites a score still to be read).
//
// Bytes moved (the compulsory traffic; N = B Hq Sq Sk scores, R = B Hq Sq query rows, 16-bit
// Q, K, V, O; cuBLAS's re-reads of Q and K tiles from L2 not counted):
//   1. S = Q·Kᵀ   reads Q (2 R d) and K (2 B Hkv Sk d), writes S:    4 N
//   2. softmax    reads S: 4 N, writes P: 2 N and L: 4 R
//   3. O = P·V    reads P: 2 N and V (2 B Hkv Sk d), writes O (2 R d)
//   in all        12 N + 2 (2 R d + 2 B Hkv Sk d) + 4 R
// The fused kernels move only the last two terms: Q, K, V, O and L. At 4x16x16x4096x4096x128
// that is 13.15 GB here (S 4.29 GB written, then read; P 2.15 GB written, then read) against
// 0.27 GB, 49 times the bytes. Causal: cuBLAS computes every score (it knows no mask), the
// softmax reads only the visible ones and still writes every P (zeros past the diagonal),
// and P·V reads all of P.
//
// cuBLAS's settings: klab::cublas_handle() (klab/cublas.hpp), the process's one handle,
// created on first use (in the harness's warm-up, never in a timed launch), its stream set at
// every launch; the math mode is CUBLAS_DEFAULT_MATH |
// CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, as for lesson 05's cuBLAS baseline. That flag matters for product 3 only: with a 16-bit
// output cuBLAS may split K = Sk (long rows, few output tiles: decoding's one query row) and
// add the partial products in the output type, each rounded to 16 bits first; the flag keeps
// every partial in fp32, as our kernels do. Product 1 writes fp32, the compute type: the
// flag changes nothing there. Compute type CUBLAS_COMPUTE_32F with 16-bit operands: the
// tensor cores, fp32 accumulation. cuBLAS's own workspace is the first 32 MiB of the
// harness's (cublasSetWorkspace after cublasSetStream, which resets it to the library's
// pool): the size cuBLAS's documentation recommends for Hopper (4 MiB before it), and every
// byte this version uses is allocated by the harness and counted in its workspace.
//
// Workspace: 32 MiB + 4 B Hq Sq Sk bytes, capped at 24 GiB (supports() says why a problem
// is past it): 4 GiB + 32 MiB at 4x16x16x4096x4096x128, 16 GiB + 32 MiB at
// 1x16x16x16384x16384x128, the largest bench shape.
//
// Precision: P is rounded to 16 bits after normalization (cuBLAS takes 16-bit operands), the
// same rounding the tensor-core kernels apply to their unnormalized p: the op's tolerance
// covers it (attention_ops.cu). In fp16 a probability under 2^-14 is subnormal, its absolute
// error under 2^-25: far inside the bound at the lengths fp16 is tested at.
//
//   klab test 09 --impl v0_materialized_scores
//   klab bench 09 --op attention_fwd --impl v0_materialized_scores,v2_mma_sync,cudnn --dtype bf16
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "attention.cuh"
#include "klab/device/online_softmax.cuh"
#include "klab/cublas.hpp"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

// The op (inputs, reference, tolerances, shapes): attention_ops.cu.

namespace lesson09 {
namespace {

constexpr int kV0Threads = 256;                      // a block a query row
constexpr int kV0PerThread = 8;                      // scores a thread holds in registers at once
constexpr int kV0Chunk = kV0Threads * kV0PerThread;  // keys a block takes at once
constexpr float kLn2 = 0.69314718f;

// ============================================================================================
// v0_materialized_scores: the softmax kernel (the two products are cuBLAS's)
// ============================================================================================

// Grid-stride over the flat query rows r = (b Hq + h) Sq + i, one block a row: S's row r is
// Sk fp32 scores at g_s + r Sk. Two passes over the visible keys [0, n):
//   1. the row's state (m, l) in base 2 (m the max of s · scale_log2, l the sum of
//      2^(s · scale_log2 - m)): each thread loads a chunk of kV0PerThread keys at once (the
//      loads independent of each other), takes the chunk's max and sum, and merges them into
//      its running state (klab::md_merge); one block_merge gives every thread the row's;
//   2. P = 2^(s · scale_log2 - m) / l, keys at or past n set to 0, written as T over the
//      first half of the row's bytes, chunk by chunk.
// In place, a chunk's P lands on scores the block has already read: chunk c's P is bytes
// [2 c C, 2 (c + 1) C) of the row (C = kV0Chunk), i.e. scores [c C / 2, (c + 1) C / 2), which
// for c >= 1 lie in earlier chunks, read in their own pass-2 step (and all of them in pass 1,
// which every thread finished before block_merge's barrier let any of them on). Only chunk 0
// overlaps itself: the barrier between reading a chunk and writing it covers it.
template <class T>
__global__ void __launch_bounds__(kV0Threads)
    attention_fwd_v0_materialized_scores_softmax(float* g_s, float* g_lse, i64 rows, int Sq, int Sk, bool causal,
                                                 float scale_log2) {
  static_assert(sizeof(T) * 2 == sizeof(float), "two 16-bit P values fit in the bytes of one fp32 score");
  static_assert(kV0Threads % 32 == 0 && kV0Threads <= 1024, "whole warps; block_merge parks one state a warp");
  __shared__ klab::MD s_md[32];
  const int tid = threadIdx.x;

  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const int n = static_cast<int>(visible_keys(r % Sq, Sq, Sk, causal));
    const float* g_row = g_s + r * Sk;
    T* g_p = reinterpret_cast<T*>(g_s + r * Sk);   // P's row r: 2 Sk elements a row of the workspace

    // Pass 1: the row's (m, l), base 2.
    klab::MD md{-INFINITY, 0.f};
    for (int c0 = 0; c0 < n; c0 += kV0Chunk) {
      float r_x[kV0PerThread];
      float cmax = -INFINITY;
#pragma unroll
      for (int k = 0; k < kV0PerThread; ++k) {
        const int j = c0 + k * kV0Threads + tid;
        r_x[k] = j < n ? g_row[j] * scale_log2 : -INFINITY;
        cmax = fmaxf(cmax, r_x[k]);
      }
      float csum = 0.f;   // stays 0 (and cmax -inf) where the thread has no visible key here
#pragma unroll
      for (int k = 0; k < kV0PerThread; ++k)
        if (c0 + k * kV0Threads + tid < n) csum += klab::ex2_approx(r_x[k] - cmax);
      md = klab::md_merge<true>(md, klab::MD{cmax, csum});
    }
    md = klab::block_merge<true>(md, s_md);

    // A row that sees no key: l = 0, m = -inf. Its P row is zeros (so O = P·V = 0) and
    // L = -inf (attention.cuh); 0 stands in for m so that no -inf - -inf is computed.
    const bool any = md.d > 0.f;
    const float m = any ? md.m : 0.f;
    const float inv_l = any ? 1.f / md.d : 0.f;
    if (tid == 0) g_lse[r] = any ? (md.m + log2f(md.d)) * kLn2 : -INFINITY;

    // Pass 2: P, every key of the row (the masked ones 0: P·V multiplies all Sk of them).
    for (int c0 = 0; c0 < Sk; c0 += kV0Chunk) {
      float r_p[kV0PerThread];
#pragma unroll
      for (int k = 0; k < kV0PerThread; ++k) {
        const int j = c0 + k * kV0Threads + tid;
        r_p[k] = j < n ? klab::ex2_approx(g_row[j] * scale_log2 - m) * inv_l : 0.f;
      }
      __syncthreads();   // the chunk's scores are read before any of its P overwrites them
#pragma unroll
      for (int k = 0; k < kV0PerThread; ++k) {
        const int j = c0 + k * kV0Threads + tid;
        if (j < Sk) g_p[j] = klab::from_f32<T>(r_p[k]);
      }
    }
    __syncthreads();   // s_md is free for the next row's block_merge
  }
}

// ============================================================================================
// Launchers
// ============================================================================================

// cuBLAS's workspace, the first bytes of the harness's; S follows (32 MiB keeps it aligned).
constexpr std::size_t kCublasWorkspace = std::size_t{32} << 20;
// The scores of the largest bench shape are 16 GiB; past 24 GiB a problem does not run here.
// On an 80 GB H100 that leaves room for the harness's own buffers (the inputs and the second
// set the replay check uses, the outputs, the L2 flush buffer); on a 40 GB A100 too.
constexpr double kWorkspaceCap = 24.0 * (1ull << 30);
constexpr i64 kIntMax = std::numeric_limits<int>::max();

// In double: B Hq Sq Sk of unchecked dims may pass 2^63; supports() reads it before any i64.
double v0_workspace_bytes(const klab::Problem& p) {
  const Shape s = shape_of(p);
  return static_cast<double>(kCublasWorkspace) +
         4.0 * static_cast<double>(s.B) * static_cast<double>(s.Hq) * static_cast<double>(s.Sq) *
             static_cast<double>(s.Sk);
}

std::size_t workspace_v0(const klab::Problem& p) {
  const double bytes = v0_workspace_bytes(p);
  return bytes <= kWorkspaceCap ? static_cast<std::size_t>(bytes) : kCublasWorkspace;   // past the cap: unsupported
}

std::string supports_v0(const klab::Problem& p) {
  if (std::string why = klab::require_cc(80); !why.empty()) return why;   // bf16 GEMMs on the tensor cores
  if (std::string why = supports_head_dim(p); !why.empty()) return why;
  const Shape s = shape_of(p);
  if (const double bytes = v0_workspace_bytes(p); bytes > kWorkspaceCap)
    return "the fp32 scores need " + std::to_string(static_cast<long long>(std::ceil(std::min(bytes / (1ull << 30), 1e15)))) +
           " GiB of workspace (B·Hq·Sq·Sk·4 bytes + 32 MiB for cuBLAS), past the 24 GiB cap of this version";
  // Sq·Sk: one head's score matrix, kept under 2^31 elements. cuBLAS's int interface bounds
  // dimensions, not matrix sizes (the 16.7M-key test shape hands it a K and a V of 2^31 + 5504
  // elements), so this is a margin we choose: 8 GiB of scores for one head is a regime no
  // shape here tests, and with the cap above it only a problem of one or two heads reaches it.
  // Then the arguments cuBLAS takes as int: m, n, k, the leading dimensions, the batch count
  // (its 64-bit interface, cublasGemmStridedBatchedEx_64, is for larger ones; not used here).
  if (s.Sq * s.Sk > kIntMax) return "Sq·Sk past 2^31 - 1: one head's score matrix is past cuBLAS's int range";
  const i64 G = s.Hq / s.Hkv;
  if (G * s.Sq > kIntMax) return "(Hq/Hkv)·Sq past 2^31 - 1: the rows of a cuBLAS batch entry are an int";
  if (2 * s.Sk > kIntMax) return "2·Sk past 2^31 - 1: P's leading dimension (in place over S) is an int";
  if (s.B * s.Hkv > kIntMax) return "B·Hkv past 2^31 - 1: cuBLAS's batch count is an int";
  return "";
}

// Row-major through column-major cuBLAS: a row-major (R, C) matrix is the column-major
// (C, R) matrix, its transpose. For batch entry z = b Hkv + hk (G = Hq / Hkv, M = G Sq rows):
//   S (M, Sk) = Q (M, d) · K (Sk, d)ᵀ   is column-major   Sᵀ (Sk, M) = K · Qᵀ:
//     A = K stored (Sk, d), column-major (d, Sk), taken transposed; B = Q, column-major
//     (d, M) = Qᵀ as it stands; m = Sk, n = M, k = d.
//   O (M, d) = P (M, Sk) · V (Sk, d)    is column-major   Oᵀ (d, M) = Vᵀ · Pᵀ:
//     A = V stored (Sk, d), column-major (d, Sk) = Vᵀ; B = P, column-major (Sk, M) with
//     leading dimension 2 Sk (in place over S); m = d, n = M, k = Sk.
void run_v0_materialized_scores(const klab::Launch& l) {
  const Shape s = shape_of(l.problem);
  const i64 rows = s.B * s.Hq * s.Sq;
  if (rows == 0) return;   // no query row: nothing to write
  KLAB_REQUIRE(l.workspace_bytes >= workspace_v0(l.problem), "v0_materialized_scores: workspace too small");
  const bool bf = l.problem.dtype == klab::DType::bf16;
  const cudaDataType_t t = bf ? CUDA_R_16BF : CUDA_R_16F;
  const int M = static_cast<int>(s.Hq / s.Hkv * s.Sq), Sk = static_cast<int>(s.Sk), d = static_cast<int>(s.d);
  const int batch = static_cast<int>(s.B * s.Hkv);
  float* g_s = reinterpret_cast<float*>(static_cast<char*>(l.workspace) + kCublasWorkspace);
  const float one = 1.f, zero = 0.f;
  cublasHandle_t h = klab::cublas_handle();
  KLAB_CHECK_CUBLAS(cublasSetStream(h, l.stream));
  KLAB_CHECK_CUBLAS(cublasSetWorkspace(h, l.workspace, kCublasWorkspace));

  // 1. S = Q·Kᵀ, fp32. Sk = 0: no scores (every row sees no key).
  if (Sk > 0)
    KLAB_CHECK_CUBLAS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, Sk, M, d, &one, l.in[1].data, t, d,
                                                 s.Sk * s.d, l.in[0].data, t, d, static_cast<i64>(M) * d, &zero, g_s,
                                                 CUDA_R_32F, Sk, static_cast<i64>(M) * Sk, batch, CUBLAS_COMPUTE_32F,
                                                 CUBLAS_GEMM_DEFAULT));

  // 2. P and L. log2(e) / sqrt(d): the scale and the change to base 2 in one multiply.
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(s.d)));
  const unsigned blocks = klab::grid_stride_blocks(rows * kV0Threads, kV0Threads);
  auto softmax = [&]<class T>() {
    attention_fwd_v0_materialized_scores_softmax<T><<<blocks, kV0Threads, 0, l.stream>>>(
        g_s, l.out[1].as<float>(), rows, static_cast<int>(s.Sq), Sk, is_causal(l.problem), scale_log2);
  };
  bf ? softmax.template operator()<__nv_bfloat16>() : softmax.template operator()<__half>();
  KLAB_CHECK_LAUNCH();

  // 3. O = P·V, 16-bit out. Sk = 0: O = 0 (a sum of no terms), without asking cuBLAS for k = 0.
  if (Sk == 0) {
    KLAB_CHECK_CUDA(cudaMemsetAsync(l.out[0].data, 0, l.out[0].bytes(), l.stream));
    return;
  }
  KLAB_CHECK_CUBLAS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, d, M, Sk, &one, l.in[2].data, t, d,
                                               s.Sk * s.d, g_s, t, 2 * Sk, static_cast<i64>(M) * 2 * Sk, &zero,
                                               l.out[0].data, t, d, static_cast<i64>(M) * d, batch,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "attention_fwd", .name = "v0_materialized_scores",
                                   .summary = "the textbook baseline, three kernels: S = Q·Kᵀ in fp32 by cuBLAS, a row "
                                              "softmax writing 16-bit P in place over S and L, O = P·V by cuBLAS",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v0,
                                   .workspace = workspace_v0,
                                   .run = run_v0_materialized_scores}));

}  // namespace
}  // namespace lesson09
