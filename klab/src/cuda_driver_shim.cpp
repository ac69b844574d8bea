// The driver-API functions that Triton's generated launchers and the TMA descriptors call, resolved at run time
// through the CUDA runtime (cudaGetDriverEntryPointByVersion) instead of linking libcuda.
//
// Why: a binary linked against libcuda.so.1 does not start at all on a machine without
// the NVIDIA driver, and `klab list`, `klab doctor` and the CPU tests must run there (CI).
// The runtime loads the driver lazily, so klab starts everywhere and reports "no GPU".
#include <cuda.h>
#include <cuda_runtime_api.h>

namespace {

template <class Fn>
Fn resolve(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<Fn>(fn);
}

}  // namespace

#define KLAB_FORWARD(name, params, args)                                    \
  CUresult CUDAAPI name params {                                            \
    static const auto fn = resolve<CUresult(CUDAAPI*) params>(#name);       \
    return fn ? fn args : CUDA_ERROR_NOT_INITIALIZED;                       \
  }

extern "C" {
KLAB_FORWARD(cuGetErrorString, (CUresult error, const char** pStr), (error, pStr))
KLAB_FORWARD(cuModuleUnload, (CUmodule hmod), (hmod))
KLAB_FORWARD(cuModuleLoadData, (CUmodule* module, const void* image), (module, image))
KLAB_FORWARD(cuModuleGetFunction, (CUfunction* hfunc, CUmodule hmod, const char* name), (hfunc, hmod, name))
KLAB_FORWARD(cuDeviceGetAttribute, (int* pi, CUdevice_attribute attrib, CUdevice dev), (pi, attrib, dev))
KLAB_FORWARD(cuFuncSetCacheConfig, (CUfunction hfunc, CUfunc_cache config), (hfunc, config))
KLAB_FORWARD(cuFuncSetAttribute, (CUfunction hfunc, CUfunction_attribute attrib, int value), (hfunc, attrib, value))
KLAB_FORWARD(cuLaunchKernel,
             (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
              unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
              unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra),
             (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
              kernelParams, extra))
// TMA descriptors (klab/device/tma.cuh, lesson 05's Hopper versions).
KLAB_FORWARD(cuTensorMapEncodeTiled,
             (CUtensorMap * tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, void* globalAddress,
              const cuuint64_t* globalDim, const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
              const cuuint32_t* elementStrides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
              CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill),
             (tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, boxDim, elementStrides,
              interleave, swizzle, l2Promotion, oobFill))
}
