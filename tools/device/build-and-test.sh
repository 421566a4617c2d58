#!/usr/bin/env bash
# Builds kiln against python3's libtorch 2.x on a GPU machine and runs the whole suite.
# Needs .deps/ from tools/device/pack-deps.sh (carried with the call). Prints build time and
# the ctest summary; logs go to $OUT when set.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
build=${BUILD_DIR:-build-device}
out=${OUT:-/tmp}
[ -f .deps/include/CLI/CLI.hpp ] || { echo "build-and-test: .deps/ missing: run tools/device/pack-deps.sh first and carry .deps" >&2; exit 2; }

# Carried shared libraries (oneDNN and what it links) are found through the loader path.
export LD_LIBRARY_PATH="$PWD/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
torch_prefix=$($py -c 'import torch; print(torch.utils.cmake_prefix_path)')
echo "torch $($py -c 'import torch; print(torch.__version__, torch.cuda.is_available())')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true

start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_PREFIX_PATH="$torch_prefix" -DKILN_DEPS_DIR="$PWD/.deps" \
  -DKILN_PYTHON="$(command -v "$py")" -DCMAKE_CUDA_ARCHITECTURES=90 -DKILN_BUILD_BENCH=OFF >"$out/configure.log" 2>&1 \
  || { tail -40 "$out/configure.log"; exit 1; }
grep "kiln:" "$out/configure.log" || true
cmake --build "$build" -j "$(nproc)" >"$out/build.log" 2>&1 || { grep -B5 -A20 "error" "$out/build.log" | head -80; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

cd "$build"
set +e
ctest --output-on-failure -j 8 >"$out/ctest.log" 2>&1
rc=$?
set -e
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest.log" | tail -30
tail -3 "$out/ctest.log"
exit $rc
