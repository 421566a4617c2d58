#!/usr/bin/env bash
# One device call of the optimization loop: builds kilnc, kiln-run, the runtime library and
# kiln_engine_cuda_tests with the CUDA backend, runs the CUDA layer tests (GTEST_FILTER), takes
# per-layer profiles (PROFILE="model:batch[:fp16|fp32] ...", fp16 plans unless named,
# `kiln-run --profile`: device time per layer from CUDA events; PROFILE_TAG suffixes the log
# names) and runs bench/gpu/bench.py with the arguments given (none: no benchmark). The test
# log, the profiles and the benchmark's tables go to $OUT (a device call returns at most 8
# files); build logs stay in /tmp/kiln-iterate. CACHE_BENCH="resnet50,hf_bert" also times
# compiles with the engine cache and refit on the device (bench/compile_cache.py);
# MEMORY_BENCH="resnet50,vgg16" the peak build memory with and without resource partitioning
# (bench/build_memory.py). OPINFO="--dtypes float32,float16" runs the OpInfo conformance
# (tests/opinfo/conformance.py) compiled for cuda, OPINFO_CPU="..." the same for the CPU (the
# device's 16 cores make it quick); ENGINE_TESTS=1 builds and runs kiln_engine_tests (the CPU
# engine's own tests). KILN_TESTS=filter
# also builds kiln_tests and runs the tests of kiln_tests it selects (e.g. '*Gpu*'), PYTEST=args
# runs the package's pytest with them (pytest installed from .deps/wheels when missing). Needs
# .deps/ from tools/device/pack-deps.sh.
# Example: PROFILE="bert:32" GTEST_FILTER='CudaAttention*' gpu-iterate.sh --models bert \
#            --batches 1,32 --precisions fp16 --backends reduce-overhead,kiln
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
build=${BUILD_DIR:-build-gpu}
out=${OUT:-/tmp}
logs=/tmp/kiln-iterate
mkdir -p "$logs"
source tools/device/common.sh
start=$(date +%s)
configure_gpu_build "$build" "$logs/configure.log" || exit 1
targets=(kilnc kiln-run kiln_runtime kiln_python_package kiln_engine_cuda_tests)
[ -n "${KILN_TESTS:-}" ] && targets+=(kiln_tests)
[ -n "${ENGINE_TESTS:-}" ] && targets+=(kiln_engine_tests)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$logs/build.log" 2>&1 || { grep -B5 -A20 "error" "$logs/build.log" | head -80; exit 1; }
echo "build: $(($(date +%s) - start)) s"; slowest_build_steps "$build" 6

tests_log="$out/cuda_tests${PROFILE_TAG:-}.log"
"$build/bin/kiln_engine_cuda_tests" --gtest_filter="${GTEST_FILTER:-*}" >"$tests_log" 2>&1
echo "kiln_engine_cuda_tests: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "$tests_log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \] [A-Za-z]" "$tests_log" | sort -u
grep -B2 -A8 "Failure" "$tests_log" | head -60

if [ -n "${ENGINE_TESTS:-}" ]; then
  log="$out/kiln_engine_tests${PROFILE_TAG:-}.log"
  "$build/bin/kiln_engine_tests" --gtest_brief=1 >"$log" 2>&1
  echo "kiln_engine_tests: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "$log" | tr '\n' ' ')"
  grep -B2 -A8 "Failure" "$log" | head -40
fi

if [ -n "${KILN_TESTS:-}" ]; then
  "$py" tests/models/make_models.py --out "$build/tests/models" >"$logs/models.log" 2>&1 ||
    tail -20 "$logs/models.log"
  log="$out/kiln_tests${PROFILE_TAG:-}.log"
  NVIDIA_TF32_OVERRIDE=0 "$build/bin/kiln_tests" --gtest_filter="$KILN_TESTS" >"$log" 2>&1
  echo "kiln_tests ($KILN_TESTS): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "$log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Za-z]" "$log" | sort -u
  grep -B2 -A8 "Failure" "$log" | head -60
fi
if [ -n "${PYTEST:-}" ]; then
  "$py" -c "import pytest" 2>/dev/null ||
    "$py" -m pip install -q --no-index --find-links .deps/wheels pytest >"$logs/pip.log" 2>&1 ||
    tail -5 "$logs/pip.log"
  # shellcheck disable=SC2086
  PYTHONPATH="$build/python" "$py" -m pytest -q -p no:cacheprovider tests/python $PYTEST 2>&1 |
    tail -25 | tee "$out/pytest${PROFILE_TAG:-}.log"
fi

if [ -n "${OPINFO:-}" ]; then
  "$py" -c "import expecttest" 2>/dev/null ||
    "$py" -m pip install -q --no-index --find-links .deps/wheels expecttest >"$logs/pip.log" 2>&1 ||
    tail -5 "$logs/pip.log"
  # shellcheck disable=SC2086
  PYTHONPATH="$build/python" "$py" tests/opinfo/conformance.py --device cuda $OPINFO \
    --json "$out/opinfo_cuda.json" >"$out/opinfo_cuda.md" 2>&1
  head -14 "$out/opinfo_cuda.md" | tail -10
  grep -E "^(wrong|crash|compile error|run error):" "$out/opinfo_cuda.md" | head -30
fi
if [ -n "${OPINFO_CPU:-}" ]; then
  # shellcheck disable=SC2086
  PYTHONPATH="$build/python" "$py" tests/opinfo/conformance.py --device cpu $OPINFO_CPU \
    --json "$out/opinfo_cpu.json" >"$out/opinfo_cpu.md" 2>&1
  head -14 "$out/opinfo_cpu.md" | tail -10
  grep -E "^(wrong|crash|compile error|run error):" "$out/opinfo_cpu.md" | head -30
fi

for job in ${PROFILE:-}; do
  IFS=: read -r model batch prec <<<"$job"
  prec=${prec:-fp16}
  flags=(-p f32)
  [ "$prec" = fp16 ] && flags+=(-p f16)
  log="$out/profile_${model}_${batch}_$prec${PROFILE_TAG:-}.log"
  echo "== profile $model batch $batch $prec ${PROFILE_TAG:-}"
  OUT="$logs" BUILD_DIR="$build" bash tools/device/gpu-profile.sh "$model" "$batch" "${flags[@]}" \
    >"$log" 2>&1
  grep -E "latency|^total" "$log"
  # Time per layer kind, then the slowest layers.
  awk '/^layer +kind/ {on=1; next} on && NF >= 4 && $1 !~ /^total/ {t[$2] += $3; n[$2]++}
       END {for (k in t) printf "  %-18s %3d layers %8.4f ms\n", k, n[k], t[k]}' \
    "$log" | sort -k4 -nr
  grep -A12 "^layer  " "$log"
done

# Compile times with the engine cache and refit (bench/compile_cache.py), CACHE_BENCH="models".
if [ -n "${CACHE_BENCH:-}" ]; then
  PYTHONPATH="$build/python" PYTHONUNBUFFERED=1 "$py" bench/compile_cache.py --device cuda \
    --models "$CACHE_BENCH" 2>&1 | grep -E "^\||^device" | tee "$out/compile_cache.md"
fi

# Peak build memory and resource partitioning (bench/build_memory.py), MEMORY_BENCH="models".
if [ -n "${MEMORY_BENCH:-}" ]; then
  PYTHONPATH="$build/python" PYTHONUNBUFFERED=1 "$py" bench/build_memory.py --device cuda \
    --models "$MEMORY_BENCH" 2>&1 | grep -E "^\||^device" | tee "$out/build_memory.md"
fi
if [ $# -gt 0 ]; then
  check_runtime_libstdcxx "$build/lib/libkiln_runtime.so" || exit 1
  PYTHONUNBUFFERED=1 "$py" bench/gpu/bench.py --package-dir "$build/python" --kilnc "$build/bin/kilnc" \
    --runtime "$build/lib/libkiln_runtime.so" --out "$out" "$@" 2>&1 | tail -40
fi
