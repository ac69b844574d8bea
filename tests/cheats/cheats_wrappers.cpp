// tests/cheats/cheats_wrappers.cpp — cheat fixtures on the 1-D ops of lessons 01 and 03.
//
// Each fixture is an impl of a real op (vector_add, sum, argmax) that wraps one of the op's
// real impls and cheats in one way; `klab-cheats test` and `klab-cheats bench` must fail
// every one of them (tests/cheats/check_cheats.py asserts it). They are built into
// klab-cheats only, never into klab. What catches each (the harness feature it relies on):
//
//   cheat_write_nothing     launches nothing            poison: the output keeps the pattern
//   cheat_half              the real impl on n/2         poison (vector_add: the unwritten half);
//                                                        the reference (sum: half the terms)
//   cheat_skip_tail         the real impl on n - 3       the same, at the last 3 elements
//   cheat_write_inputs      the real impl, then zeroes   input checksums after every launch
//                           the first 16 bytes of its
//                           first input (scratch use)
//   cheat_replay_first      computes on its first call,  fresh inputs per seed (test); the
//                           replays that output after   fresh-input launch after timing (bench)
//   cheat_replay_by_output  replays per output pointer   bench: the fresh-input launch writes the
//                                                        same output buffers; test: a later check
//                                                        whose output lands at a reused address
//   cheat_replay_by_shape   replays per problem          the second seed of each shape (test);
//                                                        the fresh-input launch (bench)
//   cheat_first_calls       right on its first 8 calls,  test: the checks after the 8th; bench:
//                           then the real impl on n/2    the re-check of the last timed output
//   cheat_poison_sniffer    (argmax) computes only when  per-check poison: at n = 0 the answer
//                           the output holds 0xFF bytes  (-1) is 0xFF bytes, so the harness
//                                                        poisons with another pattern
//
// The wrapped impls size their launches from problem.shape alone, so a wrapper runs them
// on fewer elements by handing them a shorter problem with the same tensors.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/tensor.hpp"

namespace {

const klab::Impl& real_impl(const std::string& op, const std::string& name) {
  const klab::Impl* im = klab::registry().find_impl(op, name);
  KLAB_REQUIRE(im != nullptr, "cheat fixtures: no impl " + op + "/" + name + " to wrap");
  return *im;
}

// The real impl on the first n elements of the problem.
void run_on(const klab::Impl& real, const klab::Launch& l, std::int64_t n) {
  klab::Problem shorter = l.problem;
  shorter.shape.at(0) = std::max<std::int64_t>(n, 0);
  real.run(klab::Launch{shorter, l.in, l.out, l.scalars, l.stream, l.workspace, l.workspace_bytes});
}

// A device copy of every output of one launch, to replay later.
class Saved {
 public:
  void save(const klab::Launch& l) {
    bufs_.clear();
    for (const auto& o : l.out) {
      bufs_.emplace_back(o.bytes());
      if (o.bytes()) KLAB_CHECK_CUDA(cudaMemcpyAsync(bufs_.back().get(), o.data, o.bytes(), cudaMemcpyDeviceToDevice, l.stream));
    }
  }
  // Copies what was saved into the outputs, as much as fits: a replay does not care
  // whether it fits the problem.
  void replay(const klab::Launch& l) const {
    for (std::size_t k = 0; k < l.out.size() && k < bufs_.size(); ++k) {
      const std::size_t bytes = std::min(l.out[k].bytes(), bufs_[k].size());
      if (bytes) KLAB_CHECK_CUDA(cudaMemcpyAsync(l.out[k].data, bufs_[k].get(), bytes, cudaMemcpyDeviceToDevice, l.stream));
    }
  }

 private:
  std::vector<klab::DeviceBuffer> bufs_;
};

// Replays keyed on what `key` returns for a launch: the first launch for a key computes
// and saves, every later one replays.
template <class Key>
std::function<void(const klab::Launch&)> replay_keyed(const std::string& op, const std::string& real,
                                                      Key key) {
  // Never destroyed: freeing device memory from a static destructor would run after the
  // CUDA runtime has shut down at exit.
  using K = decltype(key(std::declval<const klab::Launch&>()));
  auto* saved = new std::map<K, Saved>;
  return [op, real, key, saved](const klab::Launch& l) {
    const K k = key(l);
    auto it = saved->find(k);
    if (it != saved->end()) return it->second.replay(l);
    real_impl(op, real).run(l);
    (*saved)[k].save(l);
  };
}

void add(const std::string& op, const std::string& real, const char* name, const char* summary,
         std::function<void(const klab::Launch&)> run) {
  klab::register_impl({.op = op,
                       .name = name,
                       .summary = summary,
                       .kind = klab::ImplKind::cuda,
                       .supports = [op, real](const klab::Problem& p) {
                         const klab::Impl& im = real_impl(op, real);
                         return im.supports ? im.supports(p) : std::string();
                       },
                       .workspace = [op, real](const klab::Problem& p) {
                         const klab::Impl& im = real_impl(op, real);
                         return im.workspace ? im.workspace(p) : std::size_t{0};
                       },
                       .run = std::move(run),
                       // The wrapped impl is not registered yet (static initialisation), so
                       // its own flag cannot be read here: zeroing suits either kind.
                       .zero_workspace = true});
}

// The fixtures every {n}-shaped op gets, each wrapping impl `real` of op `op`.
bool register_wrappers(const std::string& op, const std::string& real) {
  add(op, real, "cheat_write_nothing", "cheat: launches nothing", [](const klab::Launch&) {});
  add(op, real, "cheat_half", "cheat: the real impl on the first half", [op, real](const klab::Launch& l) {
    run_on(real_impl(op, real), l, l.problem.shape[0] / 2);
  });
  add(op, real, "cheat_skip_tail", "cheat: the real impl without the last 3 elements", [op, real](const klab::Launch& l) {
    run_on(real_impl(op, real), l, l.problem.shape[0] - 3);
  });
  add(op, real, "cheat_write_inputs", "cheat: right, but zeroes the head of its first input",
      [op, real](const klab::Launch& l) {
        real_impl(op, real).run(l);
        const std::size_t bytes = std::min<std::size_t>(16, l.in.at(0).bytes());
        if (bytes) KLAB_CHECK_CUDA(cudaMemsetAsync(l.in[0].data, 0, bytes, l.stream));
      });
  add(op, real, "cheat_replay_first", "cheat: computes once, replays that output on every later call",
      replay_keyed(op, real, [](const klab::Launch&) { return 0; }));
  add(op, real, "cheat_replay_by_output", "cheat: replays the first output computed into the same buffer",
      replay_keyed(op, real, [](const klab::Launch& l) { return l.out.at(0).data; }));
  add(op, real, "cheat_replay_by_shape", "cheat: replays the first output computed for the same problem",
      replay_keyed(op, real, [](const klab::Launch& l) { return l.problem.label(); }));
  auto calls = std::make_shared<int>(0);
  add(op, real, "cheat_first_calls", "cheat: right on its first 8 calls, then half the work",
      [op, real, calls](const klab::Launch& l) {
        const bool honest = ++*calls <= 8;
        run_on(real_impl(op, real), l, honest ? l.problem.shape[0] : l.problem.shape[0] / 2);
      });
  return true;
}

// A sniffer reads its output before computing: holding the 0xFF bytes that it takes for
// the harness's poison, the launch is "being checked" and it computes; holding anything
// else it assumes the output is not looked at and launches nothing. A harness that poisons
// every launch, timed ones included, with 0xFF never lets it skip; one that picks the
// pattern per check (a pattern the answer cannot equal) catches it where 0xFF is a legal
// answer. The synchronous read makes it uncapturable in a CUDA graph: bench it without
// --graph.
bool register_sniffer(const std::string& op, const std::string& real) {
  add(op, real, "cheat_poison_sniffer", "cheat: computes only when its output holds 0xFF bytes",
      [op, real](const klab::Launch& l) {
        unsigned char head[4] = {0, 0, 0, 0};
        const std::size_t bytes = std::min<std::size_t>(sizeof head, l.out.at(0).bytes());
        if (bytes) {
          KLAB_CHECK_CUDA(cudaMemcpyAsync(head, l.out[0].data, bytes, cudaMemcpyDeviceToHost, l.stream));
          KLAB_CHECK_CUDA(cudaStreamSynchronize(l.stream));
        }
        if (std::all_of(head, head + bytes, [](unsigned char b) { return b == 0xFF; })) real_impl(op, real).run(l);
      });
  return true;
}

}  // namespace

KLAB_REGISTER(register_wrappers("vector_add", "v3_vec16"));
KLAB_REGISTER(register_wrappers("sum", "v2_warp_shuffle"));
KLAB_REGISTER(register_sniffer("argmax", "v2_vec_last_block"));
