// Lesson 16 — nccl: the vendor all-reduce, NCCL's ncclAllReduce over one communicator a GPU.
//
// One host thread drives every GPU: ncclCommInitAll makes the communicators once (seconds,
// outside any timing: the harness's warm-up pays it) and each launch enqueues every rank's
// ncclAllReduce inside one ncclGroupStart/End, on that rank's stream, out of place (input
// and output are different buffers, as in the rings). NCCL picks its algorithm (ring or tree)
// and protocol per message size; NVLink SHARP (NVLS, the multicast all-reduce done inside
// the NVSwitch) is switched off before the communicators exist, so the numbers are NCCL's
// ring or tree over NVLink, algorithms of the kind this lesson teaches (README).
//
// Built only where CMake found NCCL (KLAB_HAVE_NCCL); otherwise supports() says why.
//
//   klab bench 16 --impl nccl
#include <cuda_runtime.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "allreduce.cuh"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/ranks.hpp"
#include "nccl.cuh"

namespace lesson16 {

#if KLAB_HAVE_NCCL
const std::vector<ncclComm_t>& nccl_comms(int n) {
  static std::map<int, std::vector<ncclComm_t>> made;
  auto& c = made[n];
  if (c.empty()) {
    setenv("NCCL_NVLS_ENABLE", "0", 1);   // never the NVSwitch multicast (README: why)
    std::vector<int> devices(n);
    for (int r = 0; r < n; ++r) devices[r] = r;
    c.resize(n);
    KLAB_CHECK_NCCL(ncclCommInitAll(c.data(), n, devices.data()));
  }
  return c;
}
#endif

namespace {

#if KLAB_HAVE_NCCL
void run_nccl(const klab::Launch& l) {
  const RankIO io = rank_io(l);
  if (io.n == 0) return;
  const auto& cs = nccl_comms(io.ranks);
  klab::Ranks& ranks = klab::Ranks::of(io.ranks);
  const ncclDataType_t t = l.problem.dtype == klab::DType::bf16 ? ncclBfloat16 : ncclFloat32;
  ranks.fork(l.stream);
  KLAB_CHECK_NCCL(ncclGroupStart());
  for (int r = 0; r < io.ranks; ++r)
    KLAB_CHECK_NCCL(ncclAllReduce(io.in[r], io.out[r], static_cast<size_t>(io.n), t, ncclSum, cs[r], ranks.stream(r, l.stream)));
  KLAB_CHECK_NCCL(ncclGroupEnd());
  ranks.join(l.stream);
}

std::string supports_nccl(const klab::Problem& p) { return klab::require_gpus(static_cast<int>(p.shape[0])); }
#else
void run_nccl(const klab::Launch&) {}
std::string supports_nccl(const klab::Problem&) {
  return "klab was built without NCCL (CMake found no nccl.h and libnccl; see the lesson's README)";
}
#endif

KLAB_REGISTER(klab::register_impl({.op = "allreduce",
                                   .name = "nccl",
                                   .summary = "NCCL ncclAllReduce, one communicator a GPU, NVLS off",
                                   .kind = klab::ImplKind::vendor,
                                   .supports = supports_nccl,
                                   .run = run_nccl,
                                   .stage = stage,
                                   .gather = gather}));

}  // namespace
}  // namespace lesson16
