# moec: the two commands a newcomer needs.
#   make demo   install deps if missing, build, show the moe dialect on an example layer
#   make test   install deps if missing, build (full and runtime-only), run the
#               lit + GoogleTest suites
# Other targets: build, configure, docs (regenerate docs/dialects/moe.md),
# runtime-only (the MLIR-free build the GPU machine uses), clean.

BUILD_DIR ?= build
JOBS ?= $(shell nproc)
MLIR_DIR ?= /usr/lib/llvm-22/lib/cmake/mlir
CMAKE_FLAGS ?=

.PHONY: all deps configure build demo test check docs runtime-only clean

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

test: build runtime-only
	@scripts/run-tests.sh $(BUILD_DIR) $(BUILD_DIR)-runtime

check: test

docs: configure
	cmake --build $(BUILD_DIR) --target moec-doc

$(BUILD_DIR)-runtime/build.ninja:
	cmake -G Ninja -S . -B $(BUILD_DIR)-runtime -DMOEC_RUNTIME_ONLY=ON \
	  -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

runtime-only: deps $(BUILD_DIR)-runtime/build.ninja
	cmake --build $(BUILD_DIR)-runtime -j $(JOBS)

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR)-runtime
