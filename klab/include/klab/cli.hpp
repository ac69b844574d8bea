// klab/cli.hpp — the `klab` command line (design.md §4).
//
// Exit codes: 0 success; 1 a check failed; 2 a usage error (bad verb, unknown lesson,
// malformed --shape/--dtype); 77 no GPU for a verb that needs one (CTest's skip code).
#pragma once

#include <string>

#include "klab/tensor.hpp"

namespace klab {

inline constexpr int kExitOk = 0, kExitFail = 1, kExitUsage = 2, kExitNoGpu = 77;

// "4096x4096", "4096,4096", "2^28", "1x2^20"; throws klab::Error with a one-line reason.
Dims parse_shape(const std::string& s);

int klab_main(int argc, char** argv);

}  // namespace klab
