#include "klab/triton.hpp"

#include <cuda_runtime_api.h>

#include "klab/device.hpp"
#include "klab/error.hpp"

#ifndef KLAB_TRITON_NOTE
#define KLAB_TRITON_NOTE "the build did not record whether Triton was found"
#endif

namespace klab {

const char* triton_build_note() { return KLAB_TRITON_NOTE; }

std::string triton_supported() {
  const std::string note = triton_build_note();
  if (!note.empty()) return "Triton impls not built: " + note;
  const auto& d = device_info();
  if (!d.present) return "no GPU";
  if (d.cc() < 80 || d.cc() >= 100)
    return "Triton kernels are compiled ahead of time for sm_80 (8.x devices) and sm_90 (9.x) only (device is sm_" +
           std::to_string(d.cc()) + ")";
  return "";
}

void triton_prepare() {
  static bool done = false;
  if (!done) {
    KLAB_CHECK_CUDA(cudaFree(nullptr));  // creates and binds the primary context
    done = true;
  }
}

}  // namespace klab

// The arch whose cubins the generated launchers load and run (tools/triton_aot.py): an sm_80
// cubin runs on every 8.x device, an sm_90 one on 9.x. triton_supported() has ruled out the rest.
extern "C" int klab_triton_arch(void) { return klab::device_info().cc() >= 90 ? 90 : 80; }

// A persistent Triton kernel's grid (its AOT entry's grid expression): one program per SM,
// or one per tile where there are fewer tiles.
extern "C" int klab_triton_sm_grid(int tiles) { return tiles < klab::device_info().sms ? tiles : klab::device_info().sms; }
