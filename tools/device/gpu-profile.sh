#!/usr/bin/env bash
# Per-layer profile of one bench model compiled by kilnc for cuda (DEVICE=cpu: for the CPU
# backend, on the machine's CPU; OMP_NUM_THREADS sets its threads): builds kilnc and kiln-run
# (with the CUDA backend, against python3's libtorch), traces the model with random weights (the
# text transformers with token ids and a padding mask, as bench.py runs them),
# builds a plan (kilnc --save-engine) and runs `kiln-run PLAN --device $DEVICE --profile`.
# Usage: gpu-profile.sh MODEL BATCH [kilnc flags...], e.g. gpu-profile.sh resnet50 32 -p f16 -p f32
# NCU_KERNELS=REGEX runs kiln-run under Nsight Compute instead, for the first NCU_COUNT (16)
# kernels whose names match: speed of light, occupancy, warp stalls and memory sections, clocks
# left alone (METHOD.md); NCU_SECTIONS (a space-separated list) replaces those sections and
# NCU_ARGS adds options (e.g. --cache-control none). NCU_CSV=FILE instead writes each kernel's
# duration, grid and block over three runs (caches kept warm, as in a graph replay) to FILE as
# CSV (tools/device/kernel-times.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
model=$1 batch=$2
shift 2
py=${PYTHON:-python3}
device=${DEVICE:-cuda}
build=${BUILD_DIR:-build-gpu}
out=${OUT:-/tmp}
source tools/device/common.sh
configure_gpu_build "$build" "$out/profile_configure.log" || exit 1
cmake --build "$build" -j "$(nproc)" --target kilnc kiln-run >"$out/profile_build.log" 2>&1 ||
  { grep -B5 -A20 "error" "$out/profile_build.log" | head -80; exit 1; }
tmp=$(mktemp -d)
spec=$("$py" - "$model" "$batch" "$tmp/model.ts" <<'PY'
import sys
sys.path.insert(0, "bench")
import torch
from models import make_model
model, make_input = make_model(sys.argv[1], mask=True)
x = make_input(int(sys.argv[2]))
x = tuple(x) if isinstance(x, (tuple, list)) else (x,)
with torch.no_grad():
    torch.jit.trace(model.eval(), x, check_trace=False).save(sys.argv[3])
print(" ".join("(" + ",".join(str(d) for d in t.shape) + ")@" +
               ("i64" if t.dtype == torch.long else "f32") for t in x))
PY
) || exit 1
# shellcheck disable=SC2086 (one argument per input)
"$build/bin/kilnc" "$tmp/model.ts" "$tmp/model.plan" $spec --device "$device" --save-engine "$@" |
  tail -12
if [ -n "${NCU_CSV:-}" ]; then
  ncu --clock-control none --cache-control none --csv \
    --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size \
    "$build/bin/kiln-run" "$tmp/model.plan" --device "$device" --warmup 2 --iterations 1 \
    >"$NCU_CSV"
elif [ -n "${NCU_KERNELS:-}" ]; then
  sections=${NCU_SECTIONS:-SpeedOfLight Occupancy WarpStateStats MemoryWorkloadAnalysis LaunchStats}
  ncu --clock-control none ${NCU_ARGS:-} --kernel-name "regex:$NCU_KERNELS" --launch-count "${NCU_COUNT:-16}" \
    $(printf -- '--section %s ' $sections) \
    "$build/bin/kiln-run" "$tmp/model.plan" --device "$device" --profile
else
  "$build/bin/kiln-run" "$tmp/model.plan" --device "$device" --profile
fi
