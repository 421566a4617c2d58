#!/usr/bin/env bash
# Both sides of suite rows, one device call: builds kilnc and the runtime library, then for each
# ROW (model:batch:precision:peer-mode) writes the replayed inference's kernel timeline of kiln
# (default flags) and of torch.compile in that mode (tools/device/graph_timeline.py) to
# $OUT/MODEL_bBATCH_PRECISION.md, with each timeline's first lines echoed. A row's peer mode
# "none" profiles kiln alone (no torch.compile: a short call). GTEST_FILTER=... also builds
# kiln_engine_cuda_tests and runs the tests it selects first.
# Usage: row-timelines.sh shufflenet_v2_x1_0:32:fp32:reduce-overhead-tf32 resnet50:1:fp16:none
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
build=${BUILD_DIR:-build-gpu}
out=${OUT:-/tmp}
[ $# -gt 0 ] || { echo "usage: $0 MODEL:BATCH:PRECISION:PEER_MODE..." >&2; exit 2; }
for row in "$@"; do
  IFS=: read -r model batch prec peer <<<"$row"
  [ -n "$peer" ] || { echo "row '$row': want model:batch:precision:peer-mode" >&2; exit 2; }
done
source tools/device/common.sh
start=$(date +%s)
configure_gpu_build "$build" "$out/timelines_configure.log" || exit 1
targets=(kilnc kiln_runtime)
[ -n "${GTEST_FILTER:-}" ] && targets+=(kiln_engine_cuda_tests)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$out/timelines_build.log" 2>&1 ||
  { grep -B5 -A20 "error" "$out/timelines_build.log" | head -80; exit 1; }
echo "build: $(($(date +%s) - start)) s"
status=0
if [ -n "${GTEST_FILTER:-}" ]; then
  "$build/bin/kiln_engine_cuda_tests" --gtest_filter="$GTEST_FILTER" >"$out/cuda_tests.log" 2>&1 ||
    status=1
  grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "$out/cuda_tests.log"
  grep -B2 -A8 "Failure" "$out/cuda_tests.log" | head -40
fi
for row in "$@"; do
  IFS=: read -r model batch prec peer <<<"$row"
  f="$out/${model}_b${batch}_${prec}.md"
  : >"$f"
  sides=(kiln)
  [ "$peer" = none ] || sides+=("$peer")
  for side in "${sides[@]}"; do
    args=("$model" "$batch" --precision "$prec" --kilnc "$build/bin/kilnc"
          --runtime "$build/lib/libkiln_runtime.so")
    [ "$side" = kiln ] || args+=(--peer "$side")
    if "$py" tools/device/graph_timeline.py "${args[@]}" >>"$f" 2>"$f.err"; then
      echo >>"$f"
    else
      echo "$row $side: failed"; tail -5 "$f.err"; status=1
    fi
  done
  rm -f "$f.err"
  grep -E "^(# |[0-9]+ kernels)" "$f"
done
exit $status
