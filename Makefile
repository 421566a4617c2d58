# kiln: `make` builds into build/, `make test` sets up, builds and runs the whole suite.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps configure build test clean format bench-cpu demo bench-models test-asan fuzz \
	fuzz-build fuzz-smoke opinfo

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
ifneq ($(FUZZ_SMOKE),0)
	@$(MAKE) --no-print-directory fuzz-smoke
endif

# The suite built with AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/). Leaks are
# checked in the programs that link no libtorch (its static caches look like leaks); libtorch's
# own code is not instrumented.
ASAN_BUILD_DIR ?= build-asan
# libasan is preloaded so that python, which the tests run to load libkiln_runtime.so, has the
# runtime the library needs; libstdc++ with it, because python loads libstdc++ only later (with
# libtorch) and ASan's __cxa_throw interceptor, set up at start, would find no real __cxa_throw:
# the first C++ exception libtorch throws in python then aborts in ASan's CHECK. A huge allocation
# returns null so that kiln reports out-of-memory. verify_asan_link_order=0: the oneDNN fallback
# test preloads its own thunk library (no allocator) ahead of libasan, which is harmless.
# The concurrency test runs 1,000 calls per thread instead of 10,000 (KILN_STRESS_CALLS). The
# leak checks run whole binaries, where Logging.EnvironmentVariableSetsTheLevel cannot pass (it
# needs a process that has not read the log level yet); ctest runs it alone.
ASAN_ENV = LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
	KILN_STRESS_CALLS=1000 \
	ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:alloc_dealloc_mismatch=0:verify_asan_link_order=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
test-asan: deps
	cmake -S . -B $(ASAN_BUILD_DIR) -G Ninja -DKILN_SANITIZE=address,undefined \
		-DKILN_BUILD_BENCH=OFF -DKILN_ENABLE_CUDA=OFF -DKILN_BUILD_PYTHON=OFF $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	cd $(ASAN_BUILD_DIR) && $(ASAN_ENV) ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)
	ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(ASAN_BUILD_DIR)/bin/kiln_engine_tests --gtest_brief=1
	ASAN_OPTIONS=detect_leaks=1 $(ASAN_BUILD_DIR)/bin/kiln_util_tests --gtest_brief=1 \
		--gtest_filter=-Logging.EnvironmentVariableSetsTheLevel

# libFuzzer targets (fuzz/, clang; build-fuzz/): `make fuzz` runs each for FUZZ_SECONDS,
# `make test` runs each for FUZZ_SMOKE_SECONDS so that regressions show in CI (FUZZ_SMOKE=0 skips
# that: the clang build it needs takes about 10 minutes cold on 2 cores, a minute with ccache).
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 30
FUZZ_TARGETS ?= plan engine_state ir spec pt2
fuzz-build: deps
	cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DKILN_FUZZ=ON \
		-DKILN_WERROR=OFF -DBUILD_TESTING=OFF -DKILN_BUILD_BENCH=OFF -DKILN_ENABLE_CUDA=OFF \
		-DKILN_BUILD_PYTHON=OFF
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target $(FUZZ_TARGETS:%=%_fuzz)

fuzz: fuzz-build
	JOBS=$(JOBS) bash fuzz/run.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-smoke: fuzz-build
	JOBS=$(JOBS) bash fuzz/run.sh $(FUZZ_BUILD_DIR) $(FUZZ_SMOKE_SECONDS) $(FUZZ_TARGETS)

# PyTorch's OpInfo samples through the package, every op in f32, f16 and i64 (issue #35): the
# outcome table and what falls back, by reason (the ctest `opinfo_conformance` runs a budget).
opinfo: deps
	@$(MAKE) --no-print-directory build
	PYTHONPATH=$(BUILD_DIR)/python .venv/bin/python tests/opinfo/conformance.py \
		--dtypes float32,float16,int64 --json $(BUILD_DIR)/opinfo.json

# CPU kernels against libtorch (OMP_NUM_THREADS=1 for stable figures on a loaded machine).
bench-cpu: deps configure
	cmake --build $(BUILD_DIR) --target kiln_engine_cpu_bench -j $(JOBS)
	$(BUILD_DIR)/bin/kiln_engine_cpu_bench $(BENCH_ARGS)

# Compile a random-weight resnet18 with kilnc and compare it with PyTorch (scripts/demo.sh).
demo:
	@BUILD_DIR=$(BUILD_DIR) JOBS=$(JOBS) CMAKE_ARGS="$(CMAKE_ARGS)" bash scripts/demo.sh

# kiln's CPU backend against PyTorch eager, torch.compile (Inductor), ONNX Runtime and OpenVINO,
# side by side in one run (bench/cpu_models/peers.py; BENCH_ARGS="--models resnet50 --threads 1"
# narrows it). The peers come from scripts/requirements-bench.txt.
bench-models: deps configure
	.venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/requirements-bench.txt
	cmake --build $(BUILD_DIR) --target kilnc kiln_runtime -j $(JOBS)
	.venv/bin/python bench/cpu_models/peers.py --kilnc $(BUILD_DIR)/bin/kilnc \
		--runtime $(BUILD_DIR)/lib/libkiln_runtime.so --out $(BUILD_DIR) $(BENCH_ARGS)

format:
	find src include tools tests bench -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' 2>/dev/null | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
