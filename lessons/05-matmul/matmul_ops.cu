// Lesson 05 — matmul: the lesson, its three ops and their CPU references.
//
//   matmul          C(M,N) = A · B          {M, N, K}         f32, bf16   variants nn, tn, nt
//   matmul_batched  C_b = A_b · B_b         {batch, M, N, K}  f32, bf16   variants nn, tn, nt
//   gemv            y(M) = A(M,K) · x(K)    {M, K}            f32, bf16
//
// The kernels live beside this file (header comments list the versions):
//   matmul_simt.cu          matmul v1_naive, v2_coalesced, v3_smem_tiles      fp32, CUDA cores
//   matmul_regtile.cu       matmul v4_regtile_1d, v5_regtile_2d, v6_vectorized, v7_warptiling,
//                           v8_autotuned; matmul_batched v7_warptiling, v8_autotuned
//   matmul_wmma.cu          matmul v9_wmma                                    bf16, tensor cores
//   matmul_mma.cu           matmul v10_mma_sync, v11_mma_pipelined, v13_mma_autotuned;
//                           matmul_batched v11_mma_pipelined, v13_mma_autotuned
//   matmul_splitk.cu        matmul v12_splitk                                 small M·N, large K
//   matmul_cublas.cu        matmul and matmul_batched cublas, cublas_tf32; gemv cublas
//   matmul_triton_impl.cu   matmul triton (the kernel: matmul_triton.py)
//   gemv.cu                 gemv v1_thread_per_row, v2_warp_per_row, v3_multi_row
//   exercise.cu             matmul exercise (the learner's v3_smem_tiles)
//   matmul_hopper.cu        matmul v14_wgmma_tma, v15_warp_specialized, v16_persistent;
//                           v18_cluster_multicast, v19_tma_store, v21_pingpong;
//                           matmul_batched v16, v18, v19            bf16, TMA + wgmma (sm_90a)
//   matmul_splitk.cu        matmul v17_splitk_wgmma                 split-K on the Hopper kernel
//   matmul_autotuned.cu     matmul v20_autotuned      the fastest bf16 version per shape
//
//   klab test 05                         verify every impl on the edge shapes
//   klab bench 05 --op matmul --dtype bf16 --variant nt
//   klab check 05                        grade the exercise (shared-memory tiles, f32)
//
// Data types. f32: fp32 in, fp32 out. bf16: bf16 in, fp32 accumulation, bf16 out (the
// layout of a bf16 linear layer; cuBLAS is called the same way, cublasGemmEx with A, B,
// C in CUDA_R_16BF and CUBLAS_COMPUTE_32F).
//
// Tolerances (why they look like this). Inputs are uniform in [-1, 1): a product a·b has
// variance 1/9, so an output c = Σ_k a·b has a typical size σ_K = sqrt(K)/3 that grows
// with K, and so does every absolute rounding error in it. Both dtypes are therefore
// judged with an absolute term proportional to σ_K, plus a relative term for the output's
// own rounding:
//   bf16  |out − ref| ≤ 2^-7·σ_K + 2^-7·|ref|,   rel-L2 ≤ 2^-8.
//         The reference is computed in fp64 from the same bf16-rounded inputs, so the only
//         errors are fp32 accumulation (≤ K·2^-23·σ_K even when the tensor core truncates,
//         under 2^-7·σ_K up to K = 65536) and the final rounding to bf16 (≤ 2^-8 relative,
//         rel-L2 ≈ 2^-9.5).
//   f32   |out − ref| ≤ 2^-12·σ_K + 2^-16·|ref|,   rel-L2 ≤ 2^-14.
//         fp32 products and sums: the accumulated rounding of a K-term sum is about
//         sqrt(K)·2^-24·σ_K for these inputs, and its worst case K·2^-24·σ_K stays under
//         2^-12·σ_K up to K = 4096 (the split-K shape's 16411 still lands far inside:
//         measured worst max_abs 7.6e-4 at σ_K = 43). The bugs a matmul can have — a
//         dropped K tile (rel-L2 ≈ sqrt(BK/K), ≥ 1/sqrt(K) for a single dropped k), a
//         wrong edge element, an unwritten (NaN) element — are far outside it.
//   rel-L2 is taken against max(||ref||, σ_K·sqrt(n)): with one or a few outputs (gemv
//         1×4097, matmul 1×1×1) ||ref|| can come out far below its typical size by chance,
//         and a 4e-5 error on an output of 0.47 failed f32's 2^-14 (gemv, seed 412593478).
//   tf32  (the cublas_tf32 baseline, an impl-level tolerance) the f32 problem with inputs
//         rounded to 10-bit mantissas: error ≈ 2^-11·σ_K, judged as bf16's absolute term
//         |out − ref| ≤ 2^-7·σ_K + 2^-9·|ref|, rel-L2 ≤ 2^-8.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "matmul.cuh"

namespace lesson05 {
namespace {

using klab::DType;
using klab::Dims;
using klab::HostTensor;
using klab::Inputs;
using klab::Problem;
using klab::TensorSpec;

// ---- shapes ----------------------------------------------------------------------------

Dims a_shape(const std::string& v, std::int64_t M, std::int64_t K) {
  return a_kmajor(v) ? Dims{M, K} : Dims{K, M};
}
Dims b_shape(const std::string& v, std::int64_t K, std::int64_t N) {
  return b_kmajor(v) ? Dims{N, K} : Dims{K, N};
}
Dims with_batch(std::int64_t b, Dims d) {
  d.insert(d.begin(), b);
  return d;
}

std::string validate_dims(const Problem& p, std::size_t rank) {
  if (p.shape.size() != rank) return "expects " + std::to_string(rank) + " sizes";
  for (auto d : p.shape)
    if (d < 0 || d > (std::int64_t{1} << 30)) return "sizes must lie in [0, 2^30]";
  return "";
}

}  // namespace

// Exported (matmul.cuh): lesson 06 checks its fused linear layers with them.
// ---- CPU reference (fp64) ---------------------------------------------------------------

// One matrix product in fp64 from host tensors in any of the three layouts. The operands
// are first copied to fp64 with K contiguous (A as (M,K), B as (N,K)), so the inner loop
// is two unit-stride streams; the output is cut into 4x4 register blocks and (rows of)
// blocks are spread over the host's cores.
void reference_gemm(const HostTensor& A, const HostTensor& B, std::int64_t a_off, std::int64_t b_off,
                    int M, int N, int K, bool a_kmaj, bool b_kmaj, double* C) {
  std::vector<double> a(static_cast<std::size_t>(M) * K), bt(static_cast<std::size_t>(N) * K);
  klab::parallel_for(M, [&](std::int64_t m0, std::int64_t m1) {
    for (std::int64_t m = m0; m < m1; ++m)
      for (std::int64_t k = 0; k < K; ++k)
        a[m * K + k] = A.get(a_off + (a_kmaj ? m * K + k : k * M + m));
  }, K);
  klab::parallel_for(N, [&](std::int64_t n0, std::int64_t n1) {
    for (std::int64_t n = n0; n < n1; ++n)
      for (std::int64_t k = 0; k < K; ++k)
        bt[n * K + k] = B.get(b_off + (b_kmaj ? n * K + k : k * N + n));
  }, K);
  const std::int64_t mb = (M + 3) / 4;
  klab::parallel_for(mb, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t ib = i0; ib < i1; ++ib) {
      const std::int64_t m = ib * 4, mcount = std::min<std::int64_t>(4, M - m);
      for (std::int64_t n = 0; n < N; n += 4) {
        const std::int64_t ncount = std::min<std::int64_t>(4, N - n);
        double acc[4][4] = {};
        const double* ar[4];
        const double* br[4];
        for (int i = 0; i < 4; ++i) ar[i] = &a[(m + std::min<std::int64_t>(i, mcount - 1)) * K];
        for (int j = 0; j < 4; ++j) br[j] = &bt[(n + std::min<std::int64_t>(j, ncount - 1)) * K];
        for (std::int64_t k = 0; k < K; ++k)
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) acc[i][j] += ar[i][k] * br[j][k];
        for (int i = 0; i < mcount; ++i)
          for (int j = 0; j < ncount; ++j) C[(m + i) * N + n + j] = acc[i][j];
      }
    }
  }, 4 * static_cast<std::int64_t>(N) * K);
}

klab::Tolerance gemm_tolerance_at(DType t, double s) {
  if (t == DType::bf16) return {std::ldexp(s, -7), std::ldexp(1.0, -7), std::ldexp(1.0, -8), s};
  return {std::ldexp(s, -12), std::ldexp(1.0, -16), std::ldexp(1.0, -14), s};
}

klab::Tolerance gemm_tolerance(DType t, std::int64_t K) { return gemm_tolerance_at(t, sigma_k(K)); }

namespace {

void generate_uniform(const Problem&, std::uint64_t seed, Inputs& in) {
  for (std::size_t i = 0; i < in.tensors.size(); ++i)
    klab::fill_uniform(in.tensors[i], klab::derive_seed(seed, i), -1.0, 1.0);
}

}  // namespace

// Sampled output positions for shapes whose full reference is too slow: 2048 random
// elements, the four corners, and 64 elements each of the last row and the last column
// (where tile-edge bugs live). Flat indices into one (M, N) matrix; batch handled outside.
std::vector<std::int64_t> sample_positions(std::int64_t M, std::int64_t N, std::uint64_t seed) {
  std::vector<std::int64_t> idx;
  if (M == 0 || N == 0) return idx;
  const std::int64_t total = M * N;
  for (int i = 0; i < 2048; ++i)
    idx.push_back(static_cast<std::int64_t>(klab::uniform01(seed, i) * static_cast<double>(total)) % total);
  for (std::int64_t m : {std::int64_t{0}, M - 1})
    for (std::int64_t n : {std::int64_t{0}, N - 1}) idx.push_back(m * N + n);
  for (int i = 0; i < 64; ++i) {
    idx.push_back((M - 1) * N + static_cast<std::int64_t>(klab::uniform01(seed, 10000 + i) * N) % N);
    idx.push_back((static_cast<std::int64_t>(klab::uniform01(seed, 20000 + i) * M) % M) * N + N - 1);
  }
  std::sort(idx.begin(), idx.end());
  idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  return idx;
}

namespace {

klab::SampledReference sampled_gemm(const Problem& p, const Inputs& in, std::uint64_t seed) {
  const Shape s = shape_of(p);
  const bool ak = a_kmajor(p.variant), bk = b_kmajor(p.variant);
  const HostTensor& A = in.tensors[0];
  const HostTensor& B = in.tensors[1];
  const std::int64_t MN = static_cast<std::int64_t>(s.M) * s.N;
  klab::SampledReference r;
  for (int b = 0; b < s.batch; ++b) {
    // A few batch entries are enough: the first, the last and one in between.
    if (s.batch > 3 && b != 0 && b != s.batch - 1 && b != s.batch / 2) continue;
    for (auto i : sample_positions(s.M, s.N, klab::derive_seed(seed, b))) r.index.push_back(b * MN + i);
  }
  r.value.resize(r.index.size());
  const std::int64_t M = s.M, N = s.N, K = s.K;
  klab::parallel_for(static_cast<std::int64_t>(r.index.size()), [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::int64_t b = r.index[i] / MN, mn = r.index[i] % MN, m = mn / N, n = mn % N;
      const std::int64_t ao = b * M * K, bo = b * K * N;
      double acc = 0;
      for (std::int64_t k = 0; k < K; ++k)
        acc += A.get(ao + (ak ? m * K + k : k * M + m)) * B.get(bo + (bk ? n * K + k : k * N + n));
      r.value[i] = acc;
    }
  }, K);
  return r;
}

// ---- the ops ----------------------------------------------------------------------------

klab::Op make_matmul_op(bool batched) {
  klab::Op op;
  op.lesson = "05";
  op.name = batched ? "matmul_batched" : "matmul";
  op.summary = batched ? "C_b = A_b · B_b over a batch of equal-sized products (strided)"
                       : "C = A · B, row-major, either operand stored transposed";
  op.dims = batched ? std::vector<std::string>{"batch", "M", "N", "K"}
                    : std::vector<std::string>{"M", "N", "K"};
  op.dtypes = {DType::f32, DType::bf16};
  op.variants = {"nn", "tn", "nt"};
  // bytes (the default): A and B read once, C written once (beta = 0: C is never read): the
  // traffic no kernel can avoid. Tiles re-read from the L2 are not counted, so GB/s here
  // is a floor of what the kernel moved, and % of peak is taken of the FLOP rate.
  op.bound = klab::Bound::compute;
  op.baseline = "cublas";
  // The tour: the first version and the best of each dtype (f32 SIMT; bf16: mma.sync for
  // the batched op, every bf16 version for the plain one).
  op.tour = batched ? std::vector<std::string>{"v7_warptiling", "v13_mma_autotuned"}
                    : std::vector<std::string>{"v1_naive", "v8_autotuned", "v20_autotuned"};
  op.seeds = 2;  // each seed costs a full fp64 product per (shape, dtype, variant)
  if (!batched) {
    op.test_shapes = {
        {1, 1, 1},          // the smallest product
        {0, 7, 5},          // empty output
        {7, 0, 5},
        {7, 5, 0},          // K = 0: C must be written as zeros
        {7, 7, 7},          // smaller than every tile
        {1, 257, 67},       // a row vector times a matrix
        {257, 1, 67},       // matrix-vector through the matmul path
        {127, 257, 67},     // primes: no dimension a multiple of any tile
        {33, 65, 4099},     // K prime and long: not a multiple of any BK, many K tiles
        {64, 48, 16411},    // small M·N, large K: the split-K regime
        {96, 200, 136},     // multiples of 8 (vector paths on) but not of the tiles
        {256, 384, 512},    // whole tiles everywhere
        {4097, 1, 4097},    // matrix-vector with a dimension past 4096
        {1031, 1021, 1027}, // about 1024^3 with every edge partial
        {264, 392, 520},    // vector loads on, whole tiles beside partial ones: the interior
                            // path (v8, v13) and the bounded one in one launch, last K tile partial
        {72, 56, 8200},     // split-K with 16-byte loads / cp.async: 29 slices of 288, the last short
        {1031, 1160, 1024}, // split-K on 90 tiles (3 slices on 132 SMs): the reduce kernel's
                            // grid-stride loop (4096 blocks of 256) runs twice
        // Row pitches multiples of 8, so the TMA versions (v14-v17) take them too:
        {8, 16, 0},         // K = 0 on a shape TMA can describe
        {24, 40, 8},        // every box larger than the matrix: all edges zero-filled
        {1000, 1016, 1000}, // partial tiles in M (128), N (256, 128) and K (64) at once
    };
    op.bench_shapes = {{4096, 4096, 4096}, {8192, 8192, 8192}, {512, 512, 32768}};
  } else {
    op.test_shapes = {
        {1, 1, 1, 1}, {0, 3, 3, 3}, {3, 7, 5, 0}, {5, 33, 17, 9},
        {7, 127, 65, 129}, {3, 96, 200, 136}, {2, 256, 256, 256},
        {131, 133, 9, 17},  // 131 z-slices, M one row past a 128 tile
    };
    // Attention-like (many small products) and a few large ones.
    op.bench_shapes = {{64, 512, 512, 64}, {32, 1024, 1024, 128}, {8, 2048, 2048, 2048}};
  }
  // A C past 2^31 elements (46349 x 46349 x 8) is 8 GiB per check in f32, and a matmul shape
  // makes dozens of checks (every impl and autotune candidate, 2 dtypes, 3 variants):
  // minutes of `klab test 05` for one index check.
  op.no_huge_shape = "C past 2^31 elements costs 8 GiB per check times dozens of checks per shape; "
                     "run it on demand: klab test 05 --op " + op.name + " --shape " +
                     (batched ? "2x32775x32775x8" : "46349x46349x8");
  op.inputs = [batched](const Problem& p) {
    const Shape s = shape_of(p);
    Dims a = a_shape(p.variant, s.M, s.K), b = b_shape(p.variant, s.K, s.N);
    if (batched) a = with_batch(s.batch, a), b = with_batch(s.batch, b);
    return std::vector<TensorSpec>{{"A", p.dtype, a}, {"B", p.dtype, b}};
  };
  op.outputs = [batched](const Problem& p) {
    const Shape s = shape_of(p);
    Dims c{s.M, s.N};
    if (batched) c = with_batch(s.batch, c);
    return std::vector<TensorSpec>{{"C", p.dtype, c}};
  };
  op.generate = generate_uniform;
  op.reference = [](const Problem& p, const Inputs& in) {
    const Shape s = shape_of(p);
    const std::int64_t MN = static_cast<std::int64_t>(s.M) * s.N;
    klab::Reference ref = klab::single_output(klab::RefArray(static_cast<std::size_t>(s.batch * MN)));
    for (int b = 0; b < s.batch; ++b)
      reference_gemm(in.tensors[0], in.tensors[1], static_cast<std::int64_t>(b) * s.M * s.K,
                     static_cast<std::int64_t>(b) * s.K * s.N, s.M, s.N, s.K,
                     a_kmajor(p.variant), b_kmajor(p.variant), ref[0].data() + b * MN);
    return ref;
  };
  op.sample_only = [](const Problem& p) {
    const Shape s = shape_of(p);
    return static_cast<double>(s.batch) * s.M * s.N * s.K > 3e9;
  };
  op.reference_sample = [](const Problem& p, const Inputs& in, std::uint64_t seed) {
    return std::vector<klab::SampledReference>{sampled_gemm(p, in, seed)};
  };
  op.tolerance = [](const Problem& p, int) { return gemm_tolerance(p.dtype, shape_of(p).K); };
  op.flops = [](const Problem& p) {
    const Shape s = shape_of(p);
    return 2.0 * s.batch * s.M * s.N * s.K;
  };
  op.validate = [batched](const Problem& p) {
    std::string why = validate_dims(p, batched ? 4 : 3);
    if (why.empty() && batched && p.shape[0] > 65535) why = "batch must be <= 65535 (grid z)";
    return why;
  };
  return op;
}

klab::Op make_gemv_op() {
  klab::Op op;
  op.lesson = "05";
  op.name = "gemv";
  op.summary = "y = A · x, A (M, K) row-major: matrix-vector, bound by reading A once";
  op.dims = {"M", "K"};
  op.dtypes = {DType::f32, DType::bf16};
  // bytes (the default): A and x read once, y written: x is re-read by every row, but from
  // the cache, so the traffic the op needs counts it once. A is nearly all of it (y is M of
  // M·K + K + M elements): judged against the read bandwidth.
  op.bound = klab::Bound::memory_read;
  op.baseline = "cublas";
  op.tour = {"v1_thread_per_row", "v3_multi_row"};
  // v2 takes a warp per row from 8448 rows on (132 SMs x 64 warps), a block per row below;
  // v3 picks W warps per row from the row's 16-byte chunks and R rows per group from M:
  //   {10007, 136}        warp per row, 16-byte loads; v3 W = 1, R = 1
  //   {10009, 129}        warp per row, element loads (K odd; v3 unsupported)
  //   {67, 2056}          v3 W = 4 (f32) and W = 2 (bf16)
  //   {4096, 4096}        v3 W = 8, R = 2 (f32); W = 4, R = 1 (bf16)
  //   {(1 << 24) + 3, 8}  v3 R = 4 with rows past M in the last group; v2's grid (2^20 blocks
  //                       of 8 rows) is capped and its row loop runs twice
  //   {32771, 65536}      A has 2,147,680,256 elements: row offsets past 2^31 (v3 W = 8, R = 4)
  op.test_shapes = {{0, 0}, {0, 5}, {5, 0}, {1, 1}, {7, 7}, {1, 4097}, {4097, 1},
                    {127, 1023}, {1023, 4099}, {33, 100003}, {4096, 4096},
                    {10007, 136}, {10009, 129}, {67, 2056}, {(1 << 24) + 3, 8}, {32771, 65536}};
  op.bench_shapes = {{8192, 8192}, {16384, 16384}, {65536, 1024}, {1024, 65536}};
  op.inputs = [](const Problem& p) {
    return std::vector<TensorSpec>{{"A", p.dtype, {p.shape[0], p.shape[1]}}, {"x", p.dtype, {p.shape[1]}}};
  };
  op.outputs = [](const Problem& p) {
    return std::vector<TensorSpec>{{"y", p.dtype, {p.shape[0]}}};
  };
  op.generate = generate_uniform;
  op.reference = [](const Problem& p, const Inputs& in) {
    const std::int64_t M = p.shape[0], K = p.shape[1];
    klab::Reference ref = klab::single_output(klab::RefArray(static_cast<std::size_t>(M)));
    std::vector<double> x(static_cast<std::size_t>(K));
    for (std::int64_t k = 0; k < K; ++k) x[k] = in.tensors[1].get(k);
    klab::parallel_for(M, [&](std::int64_t m0, std::int64_t m1) {
      for (std::int64_t m = m0; m < m1; ++m) {
        double acc = 0;
        for (std::int64_t k = 0; k < K; ++k) acc += in.tensors[0].get(m * K + k) * x[k];
        ref[0][m] = acc;
      }
    }, K);
    return ref;
  };
  op.tolerance = [](const Problem& p, int) { return gemm_tolerance(p.dtype, p.shape[1]); };
  op.flops = [](const Problem& p) { return 2.0 * p.shape[0] * p.shape[1]; };
  op.validate = [](const Problem& p) {
    std::string why = validate_dims(p, 2);
    if (why.empty() && p.shape[0] * p.shape[1] > (std::int64_t{1} << 34))
      why = "M·K must be <= 2^34";
    return why;
  };
  return op;
}

KLAB_REGISTER(klab::register_lesson({
    .id = "05",
    .slug = "matmul",
    .title = "Matrix multiplication: from a naive loop to tensor cores",
    .exercise_op = "matmul",
    .exercise_reference = "v3_smem_tiles",
    .exercise_hint = "lessons/05-matmul/exercise.cu: fill in the tile loads, the barriers and the inner product",
}));
KLAB_REGISTER(klab::register_op(make_matmul_op(false)));
KLAB_REGISTER(klab::register_op(make_matmul_op(true)));
KLAB_REGISTER(klab::register_op(make_gemv_op()));

}  // namespace
}  // namespace lesson05
