# Kernel Lab — the two commands:
#   make run    set up, build, and run the whole curriculum (verify, then bench)
#   make test   set up, build, and run the tests (CPU tests; GPU checks skip without a GPU)
# Both do all set-up on a fresh machine (tools/setup.sh): distribution packages, a .venv
# with triton==3.6.0 and the cuDNN frontend's headers, the CMake configure and build. `make` alone sets up and builds.
# The build writes build/env.sh: `source build/env.sh` puts `klab` on PATH.
# No GPU? docs/no-gpu.md says what works and how to run the course on a GPU machine.
PRESET ?= default
JOBS ?= $(shell nproc)
BUILD_DIR := build
KLAB := ./$(BUILD_DIR)/klab

.PHONY: all setup build env-sh run test clean

all: build

setup:
	@tools/setup.sh

build: setup
	@cmake --preset $(PRESET) >/dev/null
	@cmake --build --preset $(PRESET) -j $(JOBS)
	@$(MAKE) -s --no-print-directory env-sh
	@echo "make: built; \`source $(BUILD_DIR)/env.sh\` makes \`klab\` available by name in this shell"

# One line that puts the directory holding klab first on PATH (an absolute path, so the
# file can be sourced from anywhere). tests/CMakeLists.txt (cli.env_sh) runs this target
# with BUILD_DIR set to its build directory, then `klab list` by name in a clean shell.
env-sh:
	@printf "export PATH='%s':\"\$$PATH\"\n" "$(abspath $(BUILD_DIR))" > $(BUILD_DIR)/env.sh

# Exit 77 (no GPU) is reported, not treated as a failure of the build.
run: build
	@$(KLAB) run $(LESSONS); rc=$$?; \
	if [ $$rc -eq 77 ]; then echo "make run: no GPU on this machine: everything is built; kernels need an NVIDIA GPU (compute capability 8.0+): see docs/no-gpu.md"; exit 0; fi; \
	exit $$rc

test: build
	@ctest --preset $(PRESET) -j $(JOBS)

clean:
	rm -rf $(BUILD_DIR)
