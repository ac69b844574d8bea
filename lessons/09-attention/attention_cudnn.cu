// lessons/09-attention/attention_cudnn.cu — the vendor baseline: cuDNN's scaled dot-product
// attention (SDPA), forward and backward, through the cuDNN frontend's graph API.
//
// Impls registered here (the same impl name for two ops):
//   cudnn  attention_fwd:  graph.sdpa(q, k, v): O and its Stats (the row's log-sum-exp of the
//                          scaled scores, natural log: the op's L), scale 1/sqrt(d), the causal
//                          mask aligned bottom-right (the op's convention, attention.cuh) for the
//                          causal variant; K and V with fewer heads than Q for grouped-query
//                          problems, as the op lays them out.
//          attention_bwd:  graph.sdpa_backward(q, k, v, o, dO, stats): dQ, dK, dV, with the
//                          op's L bound as the Stats input (it is what the forward's Stats
//                          output holds), the same scale and mask (aligned top-left where
//                          Sq = Sk, the same mask, which cuDNN's backward runs faster: see
//                          built_bwd_for); dK and dV summed over the query heads of a group
//                          by cuDNN itself.
//
// Built only when CMake found cuDNN 9 and the frontend's headers (the PyPI package
// nvidia-cudnn-frontend, which tools/setup.sh installs into .venv beside Triton): the impls
// are registered either way, and without them supports() says why. A graph is built and its
// plan chosen (cuDNN's heuristics, mode A) once a problem, on first use, outside the timed
// launches; a problem cuDNN does not support is reported unsupported with cuDNN's reason.
// The settings: tensors in the op's dtype (bf16 or fp16), fp32 compute and intermediates,
// Stats in fp32. The backward also keeps cuDNN's default set_deterministic_algorithm(false),
// said explicitly: dQ is summed across key blocks in an fp32 workspace buffer in whatever
// order the blocks finish, as this lesson's atomic-dQ kernel does, so the two are timed doing
// the same kind of work (the deterministic mode buys bit-reproducibility with extra workspace
// or serialized dQ reductions). Its workspace holds that fp32 dQ, the rows' D = rowsum(dO * O)
// and, for grouped-query problems, dK and dV per query head before their sum over the group.
//
// Run:  klab bench 09 --op attention_fwd --impl v2_mma_sync,cudnn
//       klab bench 09 --op attention_bwd --impl v1_mma_atomic_dq,cudnn
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include "attention.cuh"
#include "klab/error.hpp"
#include "klab/op.hpp"

#if KLAB_HAVE_CUDNN_FRONTEND
#include "klab/cudnn_frontend.hpp"
#endif

namespace lesson09 {
namespace {

#if KLAB_HAVE_CUDNN_FRONTEND
namespace fe = cudnn_frontend;
using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;

// A built graph, its tensors in the order the launch binds them (q, k, v, o, stats), and the
// workspace it needs; or, where cuDNN refused the problem, why.
struct Built {
  fe::graph::Graph graph;
  Tensor q, k, v, o, stats;
  std::int64_t workspace = 0;
  std::string why;   // "" when built
};

// A (B, H, S, d) tensor, contiguous and row-major (the op's layout).
Tensor bhsd(fe::graph::Graph& g, const char* name, i64 B, i64 H, i64 S, i64 d, fe::DataType_t t) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_dim({B, H, S, d})
                      .set_stride({H * S * d, S * d, d, 1})
                      .set_data_type(t));
}

// What tells two problems' graphs apart: the shape, the dtype and the mask.
using Key = std::tuple<i64, i64, i64, i64, i64, i64, int, bool>;

Key key_of(const klab::Problem& p) {
  const Shape s = shape_of(p);
  return {s.B, s.Hq, s.Hkv, s.Sq, s.Sk, s.d, static_cast<int>(p.dtype), is_causal(p)};
}

fe::DataType_t io_type(const klab::Problem& p) {
  return p.dtype == klab::DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

// The built graph of a problem, made once (thread-safe: the harness may ask from supports()
// and run()).
Built* built_for(const klab::Problem& p) {
  static std::mutex m;
  static std::map<Key, std::unique_ptr<Built>> cache;
  const std::lock_guard<std::mutex> lock(m);
  auto& slot = cache[key_of(p)];
  if (slot) return slot.get();
  slot = std::make_unique<Built>();
  Built& b = *slot;
  const Shape s = shape_of(p);
  const bool causal = is_causal(p);
  const fe::DataType_t t = io_type(p);
  auto& g = b.graph;
  g.set_io_data_type(t).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
  b.q = bhsd(g, "q", s.B, s.Hq, s.Sq, s.d, t);
  b.k = bhsd(g, "k", s.B, s.Hkv, s.Sk, s.d, t);
  b.v = bhsd(g, "v", s.B, s.Hkv, s.Sk, s.d, t);
  auto attrs = fe::graph::SDPA_attributes()
                   .set_name("sdpa")
                   .set_generate_stats(true)
                   .set_attn_scale(1.f / std::sqrt(static_cast<float>(s.d)));
  if (causal) attrs.set_causal_mask_bottom_right(true);
  auto [o, stats] = g.sdpa(b.q, b.k, b.v, attrs);
  o->set_output(true).set_dim({s.B, s.Hq, s.Sq, s.d}).set_stride({s.Hq * s.Sq * s.d, s.Sq * s.d, s.d, 1});
  stats->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  b.o = o;
  b.stats = stats;
  b.why = klab::cudnn_fe_build(b.graph, b.workspace);
  return slot.get();
}

// The backward's built graph, its tensors in the order the launch binds them (the op's
// inputs q, k, v, o, dO, stats, then its outputs dq, dk, dv), and the workspace it needs.
struct BuiltBwd {
  fe::graph::Graph graph;
  Tensor q, k, v, o, dO, stats, dq, dk, dv;
  std::int64_t workspace = 0;
  std::string why;   // "" when built
};

// attention_bwd's graph of a problem, made once, as built_for.
BuiltBwd* built_bwd_for(const klab::Problem& p) {
  static std::mutex m;
  static std::map<Key, std::unique_ptr<BuiltBwd>> cache;
  const std::lock_guard<std::mutex> lock(m);
  auto& slot = cache[key_of(p)];
  if (slot) return slot.get();
  slot = std::make_unique<BuiltBwd>();
  BuiltBwd& b = *slot;
  const Shape s = shape_of(p);
  const fe::DataType_t t = io_type(p);
  auto& g = b.graph;
  g.set_io_data_type(t).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
  b.q = bhsd(g, "q", s.B, s.Hq, s.Sq, s.d, t);
  b.k = bhsd(g, "k", s.B, s.Hkv, s.Sk, s.d, t);
  b.v = bhsd(g, "v", s.B, s.Hkv, s.Sk, s.d, t);
  b.o = bhsd(g, "o", s.B, s.Hq, s.Sq, s.d, t);
  b.dO = bhsd(g, "dO", s.B, s.Hq, s.Sq, s.d, t);
  // The op's L, (B, Hq, Sq) fp32, is the forward's Stats laid out as cuDNN writes them:
  // (B, Hq, Sq, 1) packed, the only Stats layout cuDNN before 9.26 reads correctly.
  b.stats = g.tensor(fe::graph::Tensor_attributes()
                         .set_name("stats")
                         .set_dim({s.B, s.Hq, s.Sq, 1})
                         .set_stride({s.Hq * s.Sq, s.Sq, 1, 1})
                         .set_data_type(fe::DataType_t::FLOAT));
  auto attrs = fe::graph::SDPA_backward_attributes()
                   .set_name("sdpa_backward")
                   .set_attn_scale(1.f / std::sqrt(static_cast<float>(s.d)))
                   .set_deterministic_algorithm(false);   // cuDNN's default, said here: see the header
  // Causal: with Sq = Sk the bottom-right and the top-left alignment are the same mask, and
  // only with the top-left one does cuDNN's backward skip the masked tiles (H100,
  // 2026-11-27, 4x16x16x4096x4096x128: 2.55 ms aligned bottom-right, no faster than without
  // the mask, where PyTorch's cuDNN backend, top-left, took 1.45 ms). A fair baseline gets
  // the fast one; Sq != Sk keeps the op's bottom-right.
  if (is_causal(p)) {
    if (s.Sq == s.Sk) attrs.set_causal_mask(true);
    else attrs.set_causal_mask_bottom_right(true);
  }
  auto [dq, dk, dv] = g.sdpa_backward(b.q, b.k, b.v, b.o, b.dO, b.stats, attrs);
  // cuDNN's backward checks its outputs' dims and strides before inferring anything, so all
  // three are given: the op's contiguous layouts, dK and dV with the K/V heads.
  dq->set_output(true).set_dim({s.B, s.Hq, s.Sq, s.d}).set_stride({s.Hq * s.Sq * s.d, s.Sq * s.d, s.d, 1});
  dk->set_output(true).set_dim({s.B, s.Hkv, s.Sk, s.d}).set_stride({s.Hkv * s.Sk * s.d, s.Sk * s.d, s.d, 1});
  dv->set_output(true).set_dim({s.B, s.Hkv, s.Sk, s.d}).set_stride({s.Hkv * s.Sk * s.d, s.Sk * s.d, s.d, 1});
  b.dq = dq;
  b.dk = dk;
  b.dv = dv;
  b.why = klab::cudnn_fe_build(b.graph, b.workspace);
  return slot.get();
}
#endif

std::string supports_cudnn(const klab::Problem& p) {
#if KLAB_HAVE_CUDNN_FRONTEND
  const Shape s = shape_of(p);
  if (s.B * s.Hq * s.Sq * s.Sk * s.d == 0) return "cuDNN takes no empty tensor";
  if (p.dtype != klab::DType::bf16 && p.dtype != klab::DType::f16) return "cuDNN's SDPA takes bf16 and fp16";
  const Built* b = built_for(p);
  return b->why.empty() ? "" : "cuDNN: " + b->why;
#else
  (void)p;
  return "built without the cuDNN frontend (tools/setup.sh venv installs nvidia-cudnn-frontend; cuDNN 9 must be found too)";
#endif
}

std::size_t workspace_cudnn(const klab::Problem& p) {
#if KLAB_HAVE_CUDNN_FRONTEND
  if (!supports_cudnn(p).empty()) return 0;
  return static_cast<std::size_t>(built_for(p)->workspace);
#else
  (void)p;
  return 0;
#endif
}

void run_cudnn(const klab::Launch& l) {
#if KLAB_HAVE_CUDNN_FRONTEND
  const Built* b = built_for(l.problem);
  KLAB_REQUIRE(b->why.empty(), "cudnn: " + b->why);
  cudnnHandle_t h = klab::cudnn_handle();
  KLAB_CHECK_CUDNN(cudnnSetStream(h, l.stream));
  const AttnArgs a = attn_args(l);
  std::unordered_map<Tensor, void*> pack = {{b->q, const_cast<void*>(a.q)},
                                            {b->k, const_cast<void*>(a.k)},
                                            {b->v, const_cast<void*>(a.v)},
                                            {b->o, a.o},
                                            {b->stats, a.lse}};
  if (auto e = b->graph.execute(h, pack, l.workspace); e.is_bad()) KLAB_REQUIRE(false, "cudnn: " + e.get_message());
#else
  (void)l;
  KLAB_REQUIRE(false, "cudnn: built without the cuDNN frontend");
#endif
}

std::string supports_attention_bwd_cudnn(const klab::Problem& p) {
#if KLAB_HAVE_CUDNN_FRONTEND
  const Shape s = shape_of(p);
  if (s.B * s.Hq * s.Sq * s.Sk * s.d == 0) return "cuDNN takes no empty tensor";
  if (p.dtype != klab::DType::bf16 && p.dtype != klab::DType::f16) return "cuDNN's SDPA takes bf16 and fp16";
  const BuiltBwd* b = built_bwd_for(p);
  return b->why.empty() ? "" : "cuDNN: " + b->why;
#else
  (void)p;
  return "built without the cuDNN frontend (tools/setup.sh venv installs nvidia-cudnn-frontend; cuDNN 9 must be found too)";
#endif
}

std::size_t workspace_attention_bwd_cudnn(const klab::Problem& p) {
#if KLAB_HAVE_CUDNN_FRONTEND
  if (!supports_attention_bwd_cudnn(p).empty()) return 0;
  return static_cast<std::size_t>(built_bwd_for(p)->workspace);
#else
  (void)p;
  return 0;
#endif
}

void run_attention_bwd_cudnn(const klab::Launch& l) {
#if KLAB_HAVE_CUDNN_FRONTEND
  const BuiltBwd* b = built_bwd_for(l.problem);
  KLAB_REQUIRE(b->why.empty(), "cudnn: " + b->why);
  cudnnHandle_t h = klab::cudnn_handle();
  KLAB_CHECK_CUDNN(cudnnSetStream(h, l.stream));
  // The launch's tensors: Q, K, V, O, dO, L in; dQ, dK, dV out (attention_bwd_ops.cu).
  std::unordered_map<Tensor, void*> pack = {{b->q, l.in[0].data},   {b->k, l.in[1].data},  {b->v, l.in[2].data},
                                            {b->o, l.in[3].data},   {b->dO, l.in[4].data}, {b->stats, l.in[5].data},
                                            {b->dq, l.out[0].data}, {b->dk, l.out[1].data}, {b->dv, l.out[2].data}};
  if (auto e = b->graph.execute(h, pack, l.workspace); e.is_bad()) KLAB_REQUIRE(false, "cudnn: " + e.get_message());
#else
  (void)l;
  KLAB_REQUIRE(false, "cudnn: built without the cuDNN frontend");
#endif
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "attention_fwd", .name = "cudnn",
                                   .summary = "cuDNN's SDPA through the frontend graph API (vendor baseline)",
                                   .kind = klab::ImplKind::vendor,
                                   .supports = supports_cudnn,
                                   .workspace = workspace_cudnn,
                                   .run = run_cudnn}));
KLAB_REGISTER(klab::register_impl({.op = "attention_bwd", .name = "cudnn",
                                   .summary = "cuDNN's SDPA backward through the frontend graph API (vendor baseline)",
                                   .kind = klab::ImplKind::vendor,
                                   .supports = supports_attention_bwd_cudnn,
                                   .workspace = workspace_attention_bwd_cudnn,
                                   .run = run_attention_bwd_cudnn}));

}  // namespace lesson09
