# Kernel Lab — the two commands:
#   make run    set up, build, and run the whole curriculum (verify, then bench)
#   make test   set up, build, and run the tests (CPU tests; GPU checks skip without a GPU)
# Both do all set-up on a fresh machine (tools/setup.sh): distribution packages, a .venv
# with triton==3.6.0, the CMake configure and build.
PRESET ?= default
JOBS ?= $(shell nproc)
KLAB := ./build/klab

.PHONY: all setup build run test clean

all: build

setup:
	@tools/setup.sh

build: setup
	@cmake --preset $(PRESET) >/dev/null
	@cmake --build --preset $(PRESET) -j $(JOBS)

# Exit 77 (no GPU) is reported, not treated as a failure of the build.
run: build
	@$(KLAB) run $(LESSONS); rc=$$?; \
	if [ $$rc -eq 77 ]; then echo "make run: no GPU on this machine: everything is built; kernels need an NVIDIA GPU (compute capability 8.0+) to run."; exit 0; fi; \
	exit $$rc

test: build
	@ctest --preset $(PRESET) -j $(JOBS)

clean:
	rm -rf build
