#!/usr/bin/env bash
# Builds kiln with its CUDA backend against python3's libtorch 2.x on a GPU machine, then runs
# every GPU test in one go: kiln_engine_cuda_tests, the same under compute-sanitizer memcheck, the
# CPU engine tests, the runtime and GPU zoo tests of kiln_tests (models compiled with device cuda
# against PyTorch's CUDA eager run), and prints the zoo table of tools/device/gpu_zoo_bench.py
# (max diff, latency of kiln and eager PyTorch). Needs .deps/ from tools/device/pack-deps.sh
# (carried with the call). Logs go to $OUT when set; the last lines printed are the summary.
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
build=${BUILD_DIR:-build-gpu}
# Logs are written to a scratch folder; the ones worth reading go back under $OUT (a device call
# returns at most 8 files).
out=/tmp/kiln-gpu-logs
rm -rf "$out" && mkdir -p "$out"
keep_logs() {
  [ -n "${OUT:-}" ] || return 0
  for f in build cuda_tests memcheck gpu_zoo memcheck_zoo zoo_table; do
    for g in "$out/$f".*; do [ -f "$g" ] && cp "$g" "$OUT/"; done
  done
}
trap keep_logs EXIT
targets=${TARGETS:-"kiln_engine_tests kiln_engine_cuda_tests kiln-run kiln_runtime kiln_tests"}
source tools/device/common.sh
echo "torch $($py -c 'import torch; print(torch.__version__, torch.cuda.is_available())')"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true

start=$(date +%s)
configure_gpu_build "$build" "$out/configure.log" || exit 1
grep "kiln:" "$out/configure.log" || true
# shellcheck disable=SC2086
cmake --build "$build" -j "$(nproc)" --target $targets >"$out/build.log" 2>&1 ||
  { grep -B5 -A20 "error" "$out/build.log" | head -80; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
check_runtime_libstdcxx "$build/lib/libkiln_runtime.so" || exit 1

echo "kernel images: $(cuobjdump --list-elf "$build/bin/kiln_engine_cuda_tests" 2>/dev/null | grep -o 'sm_[0-9a-z]*' | sort | uniq -c | tr '\n' ' ')$(cuobjdump --list-ptx "$build/bin/kiln_engine_cuda_tests" 2>/dev/null | grep -c ptx) ptx"
# The execution path never waits for the whole device.
if grep -rn "cudaDeviceSynchronize" src/engine; then echo "gpu-test: cudaDeviceSynchronize in the engine"; exit 1; fi

rc=0
"$build/bin/kiln_engine_cuda_tests" >"$out/cuda_tests.log" 2>&1 || rc=1
echo "kiln_engine_cuda_tests: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "$out/cuda_tests.log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \] [A-Za-z]" "$out/cuda_tests.log" | sort -u
grep -B2 -A6 "Failure" "$out/cuda_tests.log" | head -80
if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 \
    "$build/bin/kiln_engine_cuda_tests" >"$out/memcheck.log" 2>&1
  mc=$?
  echo "memcheck: exit $mc; $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)"
  [ $mc -eq 0 ] || { rc=1; grep -m 20 -A8 "Invalid\|Error" "$out/memcheck.log" | head -60; }
else
  echo "memcheck: compute-sanitizer not found"
fi
"$build/bin/kiln_engine_cuda_tests" --gtest_also_run_disabled_tests --gtest_filter='CudaPerf.*' \
  >"$out/perf.log" 2>&1 || rc=1
grep -E "\[ perf \]|FAILED" "$out/perf.log"
"$build/bin/kiln_engine_tests" >"$out/engine_tests.log" 2>&1 || { rc=1; tail -15 "$out/engine_tests.log"; }
echo "kiln_engine_tests: $(grep -E '^\[  (PASSED|FAILED) +\]' "$out/engine_tests.log" | tr '\n' ' ')"

# The runtime and the GPU zoo (tests/gpu): test models first, as ctest's fixture would make them.
if [[ " $targets " == *" kiln_tests "* ]]; then
  grep -E "kiln: libkiln_runtime" "$out/configure.log" || true
  "$py" tests/models/make_models.py --out "$build/tests/models" >"$out/models.log" 2>&1 ||
    { rc=1; tail -20 "$out/models.log"; }
  # PyTorch's fp32 reference without TF32 (kiln's fp32 kernels never use it; torch 2.x's cuDNN
  # convolutions do by default, and its older allow_tf32 switches no longer reach every path).
  export NVIDIA_TF32_OVERRIDE=0
  zoo=${ZOO_DIR:-/tmp/kiln-gpu-zoo}
  rm -rf "$zoo" && mkdir -p "$zoo"
  KILN_GPU_ZOO_OUT="$zoo" "$build/bin/kiln_tests" --gtest_filter='*Gpu*:Runtime.*' \
    >"$out/gpu_zoo.log" 2>&1 || rc=1
  echo "kiln_tests (Gpu*, Runtime.*): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "$out/gpu_zoo.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Za-z]|GPU tests skipped" "$out/gpu_zoo.log" | sort -u
  grep -B2 -A8 "Failure" "$out/gpu_zoo.log" | head -60
  grep -E "\[ gpu-zoo \].*run 2|reference on the CPU" "$out/gpu_zoo.log"
  if command -v compute-sanitizer >/dev/null; then  # one model end to end, through libtorch
    timeout 150 compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 \
      "$build/bin/kiln_tests" --gtest_filter='*GpuZoo.*/resnet18' >"$out/memcheck_zoo.log" 2>&1
    mc=$?
    echo "memcheck (GpuZoo resnet18): exit $mc; $(grep -E 'ERROR SUMMARY' "$out/memcheck_zoo.log" | tail -1)"
    [ $mc -eq 0 ] || [ $mc -eq 124 ] || { rc=1; grep -m 20 -A8 "Invalid\|Error" "$out/memcheck_zoo.log" | head -40; }
  fi
  # One process per model, so that a crash costs one row.
  bench=("$py" tools/device/gpu_zoo_bench.py --runtime "$build/lib/libkiln_runtime.so"
         --models "$build/tests/models" --compiled "$zoo")
  { "${bench[@]}" --header
    for f in "$zoo"/*.kiln.ts; do
      n=$(basename "$f" .kiln.ts)
      "${bench[@]}" --only "$n" 2>"$out/bench_$n.err" ||
        echo "$n: FAILED (exit $?) $(grep -v Warning "$out/bench_$n.err" | tail -12)"
    done; } >"$out/zoo_table.txt" 2>&1
  cat "$out/zoo_table.txt"
  ! grep -q "FAIL" "$out/zoo_table.txt" || rc=1
fi
exit $rc
