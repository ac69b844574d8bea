// klab/cli.hpp — the `klab` command line (README.md, "A tour of the CLI").
//
// Exit codes: 0 success; 1 a check failed, nothing ran, or the GPU is unusable (a driver
// too old, a failed CUDA initialisation); 2 a usage error (bad verb, unknown lesson,
// malformed --shape/--dtype, a size that cannot fit, a bad environment setting); 77 no
// driver or no GPU for a verb that needs one (CTest's skip code).
#pragma once

#include <exception>
#include <string>

#include "klab/tensor.hpp"

namespace klab {

inline constexpr int kExitOk = 0, kExitFail = 1, kExitUsage = 2, kExitNoGpu = 77;

// "4096x4096", "4096,4096", "2^28", "1x2^20"; throws klab::Error with a one-line reason.
Dims parse_shape(const std::string& s);

int klab_main(int argc, char** argv);

// Prints one line on stderr for an exception that reached the top and returns the exit
// code: NoGpuError 77, UsageError 2, klab::Error 1; std::bad_alloc 2 when a --shape was
// requested (the size is the user's to change), else 1; anything else 1.
int report_error(std::exception_ptr e, bool shape_requested);

}  // namespace klab
