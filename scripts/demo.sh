#!/usr/bin/env bash
# make demo: sets up, builds kilnc and the runtime, compiles a random-weight torchvision resnet18
# with kilnc and runs it against PyTorch (largest difference, median latency of each).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
PYTHON=.venv/bin/python  # made by scripts/setup-deps.sh, with torch and torchvision
out=$BUILD_DIR/demo

step() { printf '\n== %s\n' "$*"; }

step "dependencies (scripts/setup-deps.sh)"
bash scripts/setup-deps.sh

step "building kilnc, libkiln_runtime.so and kiln_cpu_models_bench into $BUILD_DIR/"
[ -f "$BUILD_DIR/build.ninja" ] || cmake -S . -B "$BUILD_DIR" -G Ninja ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$JOBS" --target kilnc kiln_runtime kiln_cpu_models_bench

step "writing $out/resnet18.ts"
mkdir -p "$out"
"$PYTHON" bench/cpu_models/write_resnet18.py "$out/resnet18.ts"

step "compiling: kilnc $out/resnet18.ts $out/resnet18_kiln.ts \"(1,3,224,224)\""
"$BUILD_DIR/bin/kilnc" "$out/resnet18.ts" "$out/resnet18_kiln.ts" "(1,3,224,224)"

step "running both on one random input"
"$BUILD_DIR/bin/kiln_cpu_models_bench" compare "$out/resnet18.ts" "$out/resnet18_kiln.ts" \
  --shape 1,3,224,224 --warmup 5 --min-runs 20 --budget 5
