// debugging/catalog.cuh — what the cases' kernels share: the block size, and the ops' names.
//
// A case file (missing_barrier.cu, ...) is the learner's: one kernel with one bug, its
// launcher and its registration as the impl `exercise` of the case's op. The ops (inputs,
// fp64 references, tolerances, shapes) are in catalog_ops.cu; the fixes in
// solutions/debugging/.
#pragma once

#include <cstdint>

namespace debugging {

using i64 = std::int64_t;

// Every case launches blocks of this many threads: a warp count the reductions' trees take
// in log2 steps.
inline constexpr int kThreads = 256;
static_assert(kThreads % 32 == 0 && (kThreads & (kThreads - 1)) == 0, "a power of two of whole warps");

// split_sum's column chunk: one launch adds kColChunk columns of every row to the row's sum.
inline constexpr int kColChunk = 1024;

}  // namespace debugging
