# moec: the two commands a newcomer needs.
#   make demo   install deps if missing, build, show the moe dialect on an example layer
#   make test   install deps if missing, build (full, runtime-only and the
#               ASan + UBSan build with the fuzzers) and run every test: what
#               CI runs (scripts/run-tests.sh says what, stage by stage)
# For the edit-test loop: make check   build, then the lit + GoogleTest
#               suites and the Python suite against the build tree (no
#               package install, no sanitizers, no fuzzing)
# As a Python package: pip install . (docs/python.md, "Installing"); make
#               wheel writes the self-contained wheel to dist/ (make wheel
#               PYTHON=python3.12: for another Python, in its own tree).
# Other targets: build, configure, docs (regenerate docs/dialects/moe.md),
# runtime-only (the MLIR-free build the GPU machine uses), sanitize (the
# clang ASan + UBSan build with the fuzzers), fuzz (each fuzzer for
# FUZZ_SECONDS, default 600, on JOBS processes: fuzz/README.md), clean.

BUILD_DIR ?= build
JOBS ?= $(shell nproc)
MLIR_DIR ?= /usr/lib/llvm-22/lib/cmake/mlir
CMAKE_FLAGS ?=

.PHONY: all deps configure build demo test check docs runtime-only sanitize \
	fuzz clean wheel

all: build

deps:
	@scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -G Ninja -S . -B $(BUILD_DIR) -DMLIR_DIR=$(MLIR_DIR) \
	  -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: deps $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD_DIR)

test: build runtime-only sanitize
	@scripts/run-tests.sh test $(BUILD_DIR) $(BUILD_DIR)-runtime $(BUILD_DIR)-asan

check: build
	@scripts/run-tests.sh check $(BUILD_DIR)

# The wheel of the build tree (nothing compiles again), or of a tree of its
# own for another Python (PYTHON=python3.12: configured by pip for it).
PYTHON ?=
ifeq ($(PYTHON),)
wheel: build
	scripts/make-wheel.sh $(BUILD_DIR) dist
else
wheel: deps
	MOEC_WHEEL_PYTHON=$(PYTHON) scripts/make-wheel.sh \
	  $(BUILD_DIR)-wheel-$(notdir $(PYTHON)) dist
endif

docs: configure
	cmake --build $(BUILD_DIR) --target moec-doc

$(BUILD_DIR)-runtime/build.ninja:
	cmake -G Ninja -S . -B $(BUILD_DIR)-runtime -DMOEC_RUNTIME_ONLY=ON \
	  -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

runtime-only: deps $(BUILD_DIR)-runtime/build.ninja
	cmake --build $(BUILD_DIR)-runtime -j $(JOBS)

# clang for libFuzzer; no Python package (the sanitizer runtimes would have
# to be preloaded into python3).
$(BUILD_DIR)-asan/build.ninja:
	cmake -G Ninja -S . -B $(BUILD_DIR)-asan -DMLIR_DIR=$(MLIR_DIR) \
	  -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang-22 \
	  -DCMAKE_CXX_COMPILER=clang++-22 -DMOEC_SANITIZE=ON \
	  -DMOEC_BUILD_PYTHON=OFF $(CMAKE_FLAGS)

sanitize: deps $(BUILD_DIR)-asan/build.ninja
	cmake --build $(BUILD_DIR)-asan -j $(JOBS)

FUZZ_SECONDS ?= 600
fuzz: sanitize
	MOEC_ASAN_BUILD=$(BUILD_DIR)-asan fuzz/run.sh bundle $(FUZZ_SECONDS) $(JOBS)
	MOEC_ASAN_BUILD=$(BUILD_DIR)-asan fuzz/run.sh compiler $(FUZZ_SECONDS) $(JOBS)

# build-pip*: the build trees of `pip install .` (pyproject.toml).
clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR)-runtime $(BUILD_DIR)-asan build-pip \
	  build-pip-runtime
