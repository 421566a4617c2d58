#!/usr/bin/env bash
# Builds kilnc and libkiln_runtime with the CUDA backend against python3's libtorch 2.x on a GPU
# machine and runs bench/gpu/bench.py (kiln vs eager, TorchScript and torch.compile) in one call.
# Arguments go to bench.py (e.g. --models resnet50 --backends eager,kiln); results land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
build=${BUILD_DIR:-build-gpu}
out=${OUT:-/tmp}
[ -f .deps/include/CLI/CLI.hpp ] || { echo "gpu-bench: .deps/ missing: run tools/device/pack-deps.sh first and carry .deps" >&2; exit 2; }
export LD_LIBRARY_PATH="$PWD/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
torch_prefix=$($py -c 'import torch; print(torch.utils.cmake_prefix_path)')
start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_PREFIX_PATH="$torch_prefix" -DKILN_DEPS_DIR="$PWD/.deps" \
  -DKILN_PYTHON="$(command -v "$py")" -DCMAKE_CUDA_ARCHITECTURES=90 -DKILN_BUILD_BENCH=OFF \
  >"$out/bench_configure.log" 2>&1 || { tail -40 "$out/bench_configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target kilnc kiln_runtime >"$out/bench_build.log" 2>&1 ||
  { grep -B5 -A20 "error" "$out/bench_build.log" | head -80; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
PYTHONUNBUFFERED=1 "$py" bench/gpu/bench.py --kilnc "$build/bin/kilnc" \
  --runtime "$build/lib/libkiln_runtime.so" --out "$out" "$@"
