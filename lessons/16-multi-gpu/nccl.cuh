// Lesson 16 — NCCL as the lesson's impls use it: one communicator a GPU, made once per rank
// count, NVLS off (README: why). Only where CMake found NCCL (KLAB_HAVE_NCCL).
#pragma once

#if KLAB_HAVE_NCCL
#include <nccl.h>

#include <string>
#include <vector>

#include "klab/error.hpp"

#define KLAB_CHECK_NCCL(call)                                                                 \
  do {                                                                                        \
    const ncclResult_t e_ = (call);                                                           \
    if (e_ != ncclSuccess) throw klab::Error(std::string(#call ": ") + ncclGetErrorString(e_)); \
  } while (0)

namespace lesson16 {
// The communicators of ranks 0 .. n−1 (rank r on GPU r), made on first use and kept.
const std::vector<ncclComm_t>& nccl_comms(int n);
}  // namespace lesson16
#endif
