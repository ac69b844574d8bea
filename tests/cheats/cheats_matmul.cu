// tests/cheats/cheats_matmul.cu — an autotuned cheat fixture on lesson 05's matmul.
//
// cheat_autotuned declares two candidates and chooses between them with klab::autotune,
// as v8_autotuned and v13_mma_autotuned do:
//   exact_fast   a real impl (v7_warptiling for f32, v11_mma_pipelined for bf16)
//   wrong_slow   the same impl twice, then one output element overwritten: more work, so
//                the autotuner never picks it, and wrong
// The impl's own choice is always right; only verifying every candidate (Impl::candidates,
// Launch::candidate) exposes wrong_slow, and `bench --candidate wrong_slow` must fail its
// re-check. tests/cheats/check_cheats.py asserts both.
//
// cheat_nondeterministic declares Impl::deterministic and is not: the exact impl, then the
// lowest bit of one output element flipped on every other call, one ulp, inside every
// tolerance. Only the harness's second launch on the same inputs (test after its check,
// bench after timing) can tell; check_cheats.py asserts that both report it.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "klab/autotune.hpp"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "matmul.cuh"

namespace {

const std::vector<std::string> kNames = {"exact_fast", "wrong_slow"};

std::vector<std::string> candidates(const klab::Problem&) { return kNames; }

const klab::Impl& exact_impl(const klab::Problem& p) {
  const char* name = p.dtype == klab::DType::bf16 ? "v11_mma_pipelined" : "v7_warptiling";
  const klab::Impl* im = klab::registry().find_impl("matmul", name);
  KLAB_REQUIRE(im != nullptr, std::string("cheat_autotuned: no matmul impl ") + name + " to wrap");
  return *im;
}

// c = 2c + 1 at one element: off by |c| + 1, past any matmul tolerance (a few 2^-8 of σ_K
// plus a small fraction of |c|).
template <class T>
__global__ void corrupt_one(T* c, std::int64_t at) {
  c[at] = klab::from_f32<T>(2.0f * klab::to_f32(c[at]) + 1.0f);
}

// The lowest bit of element `at`'s representation flipped: one ulp (a zero becomes the
// smallest subnormal).
template <class T>
__global__ void flip_low_bit(T* c, std::int64_t at) {
  if constexpr (sizeof(T) == 4) reinterpret_cast<std::uint32_t*>(c)[at] ^= 1u;
  else reinterpret_cast<std::uint16_t*>(c)[at] ^= 1u;
}

void run_nondeterministic(const klab::Launch& l) {
  static int calls = 0;
  const klab::Impl& exact = exact_impl(l.problem);
  exact.run(l);
  const lesson05::Shape s = lesson05::shape_of(l.problem);
  if (++calls % 2 == 0 || static_cast<std::int64_t>(s.M) * s.N == 0) return;
  klab::dispatch_float(l.problem.dtype, [&]<class T>() { flip_low_bit<T><<<1, 1, 0, l.stream>>>(l.out[0].as<T>(), 0); });
  KLAB_CHECK_LAUNCH();
}

void run(const klab::Launch& l) {
  const klab::Impl& exact = exact_impl(l.problem);
  const lesson05::Shape s = lesson05::shape_of(l.problem);
  const std::int64_t last = static_cast<std::int64_t>(s.M) * s.N - 1;
  auto launch = [&](int c) {
    exact.run(l);
    if (c == 0 || last < 0) return;
    exact.run(l);
    klab::dispatch_float(l.problem.dtype, [&]<class T>() { corrupt_one<T><<<1, 1, 0, l.stream>>>(l.out[0].as<T>(), last); });
    KLAB_CHECK_LAUNCH();
  };
  launch(klab::autotune(l, "cheat|" + l.problem.label(), candidates(l.problem), 0, launch));
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "matmul",
                                   .name = "cheat_autotuned",
                                   .summary = "cheat: 2 candidates, the fastest right, the other wrong",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = [](const klab::Problem& p) {
                                     const klab::Impl& im = exact_impl(p);
                                     return im.supports ? im.supports(p) : std::string();
                                   },
                                   .run = run,
                                   .candidates = candidates}));
KLAB_REGISTER(klab::register_impl({.op = "matmul",
                                   .name = "cheat_nondeterministic",
                                   .summary = "cheat: promises the same bits every run, flips one bit every other call",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = [](const klab::Problem& p) {
                                     const klab::Impl& im = exact_impl(p);
                                     return im.supports ? im.supports(p) : std::string();
                                   },
                                   .run = run_nondeterministic,
                                   .deterministic = true}));
