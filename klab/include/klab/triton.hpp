// klab/triton.hpp — using Triton kernels compiled ahead of time.
//
// The build turns each lessons/*/NAME_triton.py into NAME_triton.h/.c (tools/triton_aot.py)
// and defines KLAB_HAVE_TRITON=1 when that worked. The launchers use the driver API, so the
// runtime's context must exist before the first one loads its cubin. Every kernel is built
// for sm_80 and sm_90 and the launchers pick by device (klab_triton_arch, triton.cpp); other
// devices are reported unsupported.
#pragma once

#include <string>

#include "klab/op.hpp"

namespace klab {

// "" when Triton AOT kernels can run here, else the reason (not built, wrong device).
std::string triton_supported();
// Why the build has no Triton impls ("" when it has them); set at configure time.
const char* triton_build_note();
// Makes the runtime's primary context current (cudaFree(0)) before a launcher loads.
void triton_prepare();

}  // namespace klab
