#!/usr/bin/env bash
# Builds the kiln package (and kilnc) with the CUDA backend against python3's libtorch 2.x on a GPU
# machine and runs bench/gpu/bench.py (kiln vs eager, TorchScript and torch.compile) in one call;
# kiln compiles through the package (kiln.compile), or kilnc with --via kilnc.
# Arguments go to bench.py (e.g. --models resnet50 --backends eager,kiln); results land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
build=${BUILD_DIR:-build-gpu}
out=${OUT:-/tmp}
source tools/device/common.sh
start=$(date +%s)
configure_gpu_build "$build" "$out/bench_configure.log" || exit 1
cmake --build "$build" -j "$(nproc)" --target kilnc kiln_runtime kiln_python_package \
  >"$out/bench_build.log" 2>&1 ||
  { grep -B5 -A20 "error" "$out/bench_build.log" | head -80; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
check_runtime_libstdcxx "$build/lib/libkiln_runtime.so" || exit 1
for m in "$build"/python/kiln/_kiln*.so; do check_runtime_libstdcxx "$m" || exit 1; done
PYTHONUNBUFFERED=1 "$py" bench/gpu/bench.py --package-dir "$build/python" --kilnc "$build/bin/kilnc" \
  --runtime "$build/lib/libkiln_runtime.so" --out "$out" "$@"
