#!/usr/bin/env bash
# Device time of every kernel of one inference, without the per-layer events of `kiln-run
# --profile` (which add ~3-5 us a layer): one bench model compiled as gpu-profile.sh does, three
# runs of kiln-run under Nsight Compute collecting only each kernel's duration, grid and block
# (caches not flushed), then the last run's kernels in launch order and a sum per kernel
# (tools/device/kernel_times.py).
# Usage (device, after a gpu-iterate.sh build): kernel-times.sh MODEL BATCH [kilnc flags...],
# e.g. kernel-times.sh hf_bert 1 -p f16 -p f32. Nsight Compute runs kernels one at a time: the
# gaps between kernels of a graph replay are not in these times.
set -uo pipefail
cd "$(dirname "$0")/../.."
csv=$(mktemp)
NCU_CSV="$csv" bash tools/device/gpu-profile.sh "$@" >/dev/null || exit 1
python3 tools/device/kernel_times.py "$csv"
