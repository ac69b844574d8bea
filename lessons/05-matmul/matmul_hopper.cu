// Lesson 05 — matmul on Hopper: the copy engine (TMA) fills shared memory, the warpgroup
// MMA (wgmma) reads it, mbarriers hand the stages between them. bf16 in, fp32 accumulation,
// bf16 out. One kernel (matmul_wgmma), configured by WgCfg, serves every version here:
//
//   v14_wgmma_tma        a block of two warpgroups computes a 128x256 tile, each warpgroup
//                        64x256 with wgmma.m64n256k16 (128 fp32 accumulators per thread).
//                        Tiles arrive by TMA into 128-byte-swizzled stages; one thread issues
//                        every copy, three stages ahead, in between its own MMAs. Each stage
//                        has two mbarriers: "full" (the copy's bytes landed) and "empty" (all
//                        eight warps finished their MMAs on it), so no __syncthreads in the
//                        loop; a warpgroup keeps one batch of MMAs in flight while it waits.
//   v15_warp_specialized a third warpgroup only issues copies (one thread of it), so the
//                        loads never wait behind an MMA; it gives its registers to the two
//                        MMA warpgroups (setmaxnreg: 40 for it, 232 for them); four stages.
//   v16_persistent       one block per SM walks the tiles in grouped order (matmul.cuh), so
//                        the copies of its next tile start while its MMA warpgroups are still
//                        storing the last one: the epilogue hides behind the next main loop.
//   v17_splitk_wgmma     small M·N with long K: v15's kernel on 128x128 tiles with blockIdx.z
//                        over K slices into fp32 partials, summed in slice order by
//                        matmul_v12_splitk_reduce (matmul_splitk.cu).
//   v18_cluster_multicast v16 in clusters of two CTAs stacked in M: both need the same B
//                        tile, so each copies half of it with one multicast TMA that lands in
//                        both CTAs' shared memory. B's L2 reads halve; a stage is free only
//                        when the MMA warps of both CTAs have released it (the consumers
//                        arrive on the peer's empty barrier too).
//   v19_tma_store        v18 with the epilogue through shared memory: stmatrix writes the
//                        bf16 tile in the 128-byte swizzle (one instruction per 16x16 block
//                        of a warp, where 4-byte stores need eight) and one thread per
//                        warpgroup stores it with TMA in whole lines, clipped at M and N;
//                        the C tile takes the room of the fourth stage. Where C's pitch is
//                        not a multiple of 8 it stores from registers as v18 does.
//   v21_pingpong         the two MMA warpgroups no longer share a 128x256 tile: each takes
//                        whole 64x256 tiles, the block's tiles in turn, and a named-barrier
//                        hand-off gives the tensor cores to one at a time. While one runs its
//                        main loop, the other applies its epilogue and stores its tile, so the
//                        tensor cores stay busy through every epilogue after the first. The
//                        price: a 64-row tile reads each B byte from L2 for half as many
//                        outputs (clusters of two in M, multicast, win half of it back), and
//                        each warpgroup's C staging area is its own (four stages).
//
// The shapes TMA can describe (klab/device/tma.cuh): every row pitch a multiple of 8 bf16.
// Within those, any M, N, K: the copy engine zero-fills the parts of a box outside the
// matrix, and the stores are guarded. Other shapes are reported unsupported with the
// reason; v13_mma_autotuned takes every shape. All three layouts: an operand stored K-major
// (A in nn and nt, B in nt) is copied as boxes of 64 K x rows; an M/N-major one as boxes of
// 64 M/N values x 64 k rows, and wgmma reads it transposed (klab/device/wgmma.cuh).
//
// The TMA, mbarrier and wgmma wrappers are klab/device/{tma,mbarrier,wgmma}.cuh. They need
// sm_90a: below it this kernel compiles to nothing and supports() says so.
//
//   klab test 05 --op matmul,matmul_batched --impl v14_wgmma_tma,v15_warp_specialized,v16_persistent,v18_cluster_multicast,v21_pingpong
//   klab bench 05 --op matmul --dtype bf16 --impl v16_persistent,cublas --shape 4096x4096x4096
#include <cuda_runtime.h>

#include <string>

#include "klab/error.hpp"
#include "klab/op.hpp"
#include "matmul.cuh"
#include "matmul_wgmma.cuh"

namespace lesson05 {
namespace {

template <class Cfg>
void run_wgmma_config(const klab::Launch& l) {
  launch_wgmma<Cfg, bf16>(gemm_args(l), l.problem.variant, shape_of(l.problem).batch, l.stream);
}

void run_v14_wgmma_tma(const klab::Launch& l) { run_wgmma_config<CfgV14>(l); }
void run_v15_warp_specialized(const klab::Launch& l) { run_wgmma_config<CfgV15>(l); }

}  // namespace

// "" when the TMA versions take this problem: bf16 on Hopper (sm_90a code), with row
// pitches TMA can describe.
std::string supports_wgmma(const klab::Problem& p) {
  if (p.dtype != klab::DType::bf16) return "bf16 only (tensor cores); f32 runs on the SIMT ladder";
  const auto& dev = klab::device_info();
  if (dev.present && dev.cc() != 90) return "Hopper (compute capability 9.0) only: wgmma and setmaxnreg are sm_90a";
  const Shape s = shape_of(p);
  const int64_t a_pitch = a_kmajor(p.variant) ? s.K : s.M, b_pitch = b_kmajor(p.variant) ? s.K : s.N;
  if (a_pitch % 8 != 0 || b_pitch % 8 != 0)
    return std::string("TMA needs row pitches that are multiples of 8 bf16: this layout's are ") +
           (a_kmajor(p.variant) ? "K" : "M") + " (A) and " + (b_kmajor(p.variant) ? "K" : "N") + " (B)";
  return "";
}

// Also candidates of v20_autotuned (matmul_autotuned.cu).
void run_v16_persistent(const klab::Launch& l) { run_wgmma_config<CfgV16>(l); }
void run_v18_cluster_multicast(const klab::Launch& l) { run_wgmma_config<CfgV18>(l); }
void run_v19_tma_store(const klab::Launch& l) { run_wgmma_config<CfgV19>(l); }
void run_v19_tma_store_4st(const klab::Launch& l) { run_wgmma_config<CfgV19Half>(l); }
void run_v21_pingpong(const klab::Launch& l) { run_wgmma_config<CfgV21>(l); }
void run_v21_pingpong_cluster4(const klab::Launch& l) { run_wgmma_config<CfgV21Cluster4>(l); }

// The kernels of v17_splitk_wgmma's slices, for its Impl::kernels (matmul_splitk.cu).
std::string wgmma_splitk_kernel() { return wgmma_kernel<CfgV17>(); }

// Used by split-K (v17_splitk_wgmma, matmul_splitk.cu): fp32 partials into g.C.
void launch_wgmma_splitk_bf16(const GemmArgs& g, const std::string& variant, bool out_f32, cudaStream_t s) {
  if (out_f32) launch_wgmma<CfgV17, float>(g, variant, 1, s);
  else launch_wgmma<CfgV17, bf16>(g, variant, 1, s);
}

namespace {

// ======================================================================================
// Registration
// ======================================================================================
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v14_wgmma_tma",
                                   .summary = "TMA into swizzled stages, wgmma 64x256x16, mbarrier full/empty ring",
                                   .kind = klab::ImplKind::cuda, .supports = supports_wgmma,
                                   .run = run_v14_wgmma_tma, .kernels = {wgmma_kernel<CfgV14>()}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v15_warp_specialized",
                                   .summary = "a copy warpgroup and two MMA warpgroups, setmaxnreg 40/232",
                                   .kind = klab::ImplKind::cuda, .supports = supports_wgmma,
                                   .run = run_v15_warp_specialized, .kernels = {wgmma_kernel<CfgV15>()}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v16_persistent",
                                   .summary = "one block per SM over grouped tiles, the next loads under the epilogue",
                                   .kind = klab::ImplKind::cuda, .supports = supports_wgmma,
                                   .run = run_v16_persistent, .kernels = {wgmma_kernel<CfgV16>()}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul_batched", .name = "v16_persistent",
                                   .summary = "v16 with the batch as the TMA maps' third dimension",
                                   .kind = klab::ImplKind::cuda, .supports = supports_wgmma,
                                   .run = run_v16_persistent, .kernels = {wgmma_kernel<CfgV16>()}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v18_cluster_multicast",
                                   .summary = "clusters of 2 CTAs in M: each copies half of the shared B tile to both",
                                   .kind = klab::ImplKind::cuda, .supports = supports_wgmma,
                                   .run = run_v18_cluster_multicast, .kernels = {wgmma_kernel<CfgV18>()}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v19_tma_store",
                                   .summary = "v18 with the epilogue staged by stmatrix and stored by TMA, 3 stages",
                                   .kind = klab::ImplKind::cuda, .supports = supports_wgmma,
                                   .run = run_v19_tma_store, .kernels = {wgmma_kernel<CfgV19>()}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul_batched", .name = "v19_tma_store",
                                   .summary = "v19 with the batch as the TMA maps' third dimension",
                                   .kind = klab::ImplKind::cuda, .supports = supports_wgmma,
                                   .run = run_v19_tma_store, .kernels = {wgmma_kernel<CfgV19>()}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v21_pingpong",
                                   .summary = "each MMA warpgroup a whole 64x256 tile in turn: one's epilogue under the other's MMAs",
                                   .kind = klab::ImplKind::cuda, .supports = supports_wgmma,
                                   .run = run_v21_pingpong, .kernels = {wgmma_kernel<CfgV21>()}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul_batched", .name = "v21_pingpong",
                                   .summary = "v21 with the batch as the TMA maps' third dimension",
                                   .kind = klab::ImplKind::cuda, .supports = supports_wgmma,
                                   .run = run_v21_pingpong, .kernels = {wgmma_kernel<CfgV21>()}}));
KLAB_REGISTER(klab::register_impl({.op = "matmul_batched", .name = "v18_cluster_multicast",
                                   .summary = "v18 with the batch as the TMA maps' third dimension",
                                   .kind = klab::ImplKind::cuda, .supports = supports_wgmma,
                                   .run = run_v18_cluster_multicast, .kernels = {wgmma_kernel<CfgV18>()}}));

}  // namespace
}  // namespace lesson05
