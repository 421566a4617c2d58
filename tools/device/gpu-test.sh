#!/usr/bin/env bash
# Builds kiln with its CUDA backend against python3's libtorch 2.x on a GPU machine, then runs
# every GPU test in one go: kiln_engine_cuda_tests, the same under compute-sanitizer memcheck, and
# the CPU engine tests. Needs .deps/ from tools/device/pack-deps.sh (carried with the call). Logs
# go to $OUT when set; the last lines printed are the summary.
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
build=${BUILD_DIR:-build-gpu}
out=${OUT:-/tmp}
targets=${TARGETS:-"kiln_engine_tests kiln_engine_cuda_tests kiln-run"}
[ -f .deps/include/CLI/CLI.hpp ] || { echo "gpu-test: .deps/ missing: run tools/device/pack-deps.sh first and carry .deps" >&2; exit 2; }

export LD_LIBRARY_PATH="$PWD/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
torch_prefix=$($py -c 'import torch; print(torch.utils.cmake_prefix_path)')
echo "torch $($py -c 'import torch; print(torch.__version__, torch.cuda.is_available())')"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true
# cuDNN: next to the toolkit, else python's nvidia-cudnn package.
cudnn_args=()
if [ ! -e /usr/local/cuda/include/cudnn.h ]; then
  cudnn_root=$($py -c 'import nvidia.cudnn as c; print(list(c.__path__)[0])' 2>/dev/null || true)
  if [ -n "$cudnn_root" ]; then
    cudnn_args=(-DKILN_CUDNN_ROOT="$cudnn_root")
    export LD_LIBRARY_PATH="$cudnn_root/lib:$LD_LIBRARY_PATH"
  fi
fi

start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_PREFIX_PATH="$torch_prefix" -DKILN_DEPS_DIR="$PWD/.deps" \
  -DKILN_PYTHON="$(command -v "$py")" -DCMAKE_CUDA_ARCHITECTURES=90 -DKILN_BUILD_BENCH=OFF \
  "${cudnn_args[@]}" >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
grep "kiln:" "$out/configure.log" || true
grep -q "CUDA backend enabled" "$out/configure.log" || { echo "gpu-test: CMake did not enable the CUDA backend"; exit 1; }
# shellcheck disable=SC2086
cmake --build "$build" -j "$(nproc)" --target $targets >"$out/build.log" 2>&1 ||
  { grep -B5 -A20 "error" "$out/build.log" | head -80; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

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
"$build/bin/kiln_engine_tests" >"$out/engine_tests.log" 2>&1 || rc=1
echo "kiln_engine_tests: $(grep -E '^\[  (PASSED|FAILED) +\]' "$out/engine_tests.log" | tr '\n' ' ')"
exit $rc
