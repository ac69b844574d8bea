/* A stand-in for libcuda.so.1, loaded through LD_LIBRARY_PATH by the CLI tests of a broken
 * driver installation (tests/CMakeLists.txt): the CUDA runtime asks it for the driver's
 * version and initialises it, and klab must then exit 1 naming the CUDA error, not skip.
 *   FAKE_CUDA_DRIVER_VERSION  the version it reports (default 11080: CUDA 11.8, older than
 *                             any runtime klab builds with)
 *   FAKE_CUINIT_RESULT        what cuInit returns (default 0, CUDA_SUCCESS) */
#include <stdlib.h>

static int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

int cuDriverGetVersion(int* version) {
  *version = env_int("FAKE_CUDA_DRIVER_VERSION", 11080);
  return 0;
}

int cuInit(unsigned int flags) {
  (void)flags;
  return env_int("FAKE_CUINIT_RESULT", 0);
}
