#!/usr/bin/env bash
# Set-up that `make` runs before building; safe to run again (it only does what is missing).
#   tools/setup.sh deps   C++ packages from the distribution (CLI11, nlohmann-json, fmt,
#                         GoogleTest, ninja); installs them with apt-get when run as root;
#                         then checks for the CUDA toolkit (nvcc 12.5 or newer)
#   tools/setup.sh venv   .venv with triton==3.6.0 from PyPI for the ahead-of-time compile,
#                         and the cuDNN frontend's headers (lesson 08's cuDNN baseline); when
#                         either fails the build goes on without the impls that need it
#   tools/setup.sh browser  chromium, for the test that renders `klab report` in a headless
#                         browser; installed when run as root, else that test skips (77)
set -uo pipefail
cd "$(dirname "$0")/.."
TRITON_VERSION=3.6.0
CUDNN_FRONTEND_VERSION=1.32.0
CUDA_MIN=12.5

deps() {
  local missing=()
  [ -f /usr/include/CLI/CLI.hpp ] || missing+=(libcli11-dev)
  [ -f /usr/include/nlohmann/json.hpp ] || missing+=(nlohmann-json3-dev)
  [ -f /usr/include/fmt/core.h ] || missing+=(libfmt-dev)
  [ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
  command -v ninja >/dev/null || missing+=(ninja-build)
  command -v cmake >/dev/null || missing+=(cmake)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
      echo "setup: installing ${missing[*]}"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null || { echo "setup: apt-get install failed"; exit 1; }
    else
      echo "setup: missing packages: ${missing[*]} (install them with your package manager, e.g. sudo apt-get install ${missing[*]})"
      exit 1
    fi
  fi
  toolkit
}

# The CUDA toolkit: 12.5 or newer (klab/src/cuda_driver_shim.cpp calls
# cudaGetDriverEntryPointByVersion, new in 12.5). Building needs no GPU; docs/no-gpu.md.
toolkit() {
  local nvcc
  nvcc=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })
  if [ -z "$nvcc" ]; then
    echo "setup: the CUDA toolkit (nvcc) is required to build, even without a GPU; install CUDA $CUDA_MIN or newer (docs/no-gpu.md)"
    exit 1
  fi
  local v
  v=$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
  set -- $v
  if [ $# -eq 2 ] && { [ "$1" -lt ${CUDA_MIN%.*} ] || { [ "$1" -eq ${CUDA_MIN%.*} ] && [ "$2" -lt ${CUDA_MIN#*.} ]; }; }; then
    echo "setup: $nvcc is CUDA $1.$2; Kernel Lab needs CUDA $CUDA_MIN or newer"
    exit 1
  fi
}

venv() {
  if ! { [ -x .venv/bin/python ] && .venv/bin/python -c "import triton,sys; sys.exit(triton.__version__ != '$TRITON_VERSION')" 2>/dev/null; }; then
    echo "setup: creating .venv with triton==$TRITON_VERSION (for the Triton track; about 200 MB)"
    if ! { python3 -m venv .venv && .venv/bin/pip install -q --disable-pip-version-check "triton==$TRITON_VERSION"; }; then
      echo "setup: warning: could not install triton==$TRITON_VERSION; building without the Triton impls (klab doctor says why)"
      return 0
    fi
  fi
  frontend
  return 0
}

# The cuDNN frontend's C++ headers (lesson 08's cuDNN baseline), from PyPI into .venv: they
# land in site-packages/include, where lessons/08-layernorm/CMakeLists.txt looks. Headers
# only: --no-deps leaves out the package's Python dependencies (CUTLASS's DSL and others,
# hundreds of MB the headers do not need). Without them the cudnn impls say why they
# cannot run.
frontend() {
  ls .venv/lib/python3*/site-packages/include/cudnn_frontend.h >/dev/null 2>&1 && return 0
  echo "setup: installing nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION into .venv (its C++ headers; about 50 MB)"
  .venv/bin/pip install -q --disable-pip-version-check --no-deps "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION" ||
    echo "setup: warning: could not install nvidia-cudnn-frontend; building without lesson 08's cuDNN baseline"
}

browser() {
  command -v chromium >/dev/null || command -v chromium-browser >/dev/null && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing chromium (the headless-browser test of klab report)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null && return 0
  fi
  echo "setup: note: no chromium; the headless-browser test of klab report will skip (install chromium to run it)"
  return 0
}

case "${1:-}" in
  deps) deps ;;
  venv) venv ;;
  browser) browser ;;
  *) deps; venv; browser ;;
esac
