// klab/autotune.hpp — an impl's per-shape choice among its configurations.
//
// The fastest tile configuration depends on the shape (a 128x128 tile leaves most SMs idle
// on a 512x512 output; a 64x64 tile wastes bandwidth on an 8192^3 one), so the first call
// for a shape times each candidate and every later call reuses the winner. The cache lives
// for the process (in memory); the key names the op and the impl and what decides the choice
// (shape, dtype, layout), so a new shape is timed once and two impls never share a choice
// (a key reused with another candidate list is a klab::Error). Lesson 05 teaches it (v8_autotuned,
// v13_mma_autotuned and its Triton matmul); any impl with Impl::candidates can use it.
//
// The timing runs on the launch stream during the harness's warm-up launches, never inside
// a timed launch: by the time the harness measures, the choice is a map lookup.
//
// Which candidate wins depends on timing, so verifying only the winner would leave the
// others unchecked until some shape or GPU picks them. An autotuned impl therefore names its
// candidates (Impl::candidates, the list it passes here), `klab test` runs each one by index
// (Launch::candidate), and `--candidate NAME` runs one by hand:
//
//   klab test 05 --op matmul --impl v8_autotuned --candidate 64x64x16
//
// What was run is reported, not guessed: the name of the candidate goes to Launch::chosen,
// which the harness writes into the bench row (`candidate` in the JSON, `impl[name]` in the
// table). KLAB_AUTOTUNE_LOG=1 also prints each timing to stderr (key, every candidate's
// time, the winner).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "klab/op.hpp"

namespace klab {

// `names` are the candidates for l.problem, in the order `launch(c)` takes them: the same
// list the impl returns as Impl::candidates. l.candidate >= 0 returns that index at once (no
// timing, nothing cached; an index past the list is a klab::Error); -1 autotunes: the first
// call for `key` times every candidate on l.stream (a warm launch, then the best of three
// timed launches) and remembers the fastest; later calls return it at once. The candidates
// write the same output and the caller launches the returned one afterwards, so the output
// of the call is the winner's. A call while l.stream is being captured into a CUDA graph
// cannot time anything: it returns `fallback` (or the cached winner) and caches nothing.
// Either way the returned candidate's name goes to *l.chosen when the harness asked for it.
int autotune(const Launch& l, const std::string& key, const std::vector<std::string>& names, int fallback,
             const std::function<void(int)>& launch);

}  // namespace klab
