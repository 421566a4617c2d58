# kiln: `make` builds into build/, `make test` sets up, builds and runs the whole suite.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps configure build test clean format bench-cpu

all: build

deps:
	@bash scripts/setup-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja $(CMAKE_ARGS)

configure: $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: deps
	@$(MAKE) --no-print-directory build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# CPU kernels against libtorch (OMP_NUM_THREADS=1 for stable figures on a loaded machine).
bench-cpu: deps configure
	cmake --build $(BUILD_DIR) --target kiln_engine_cpu_bench -j $(JOBS)
	$(BUILD_DIR)/bin/kiln_engine_cpu_bench $(BENCH_ARGS)

format:
	find src include tools tests bench -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' 2>/dev/null | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
