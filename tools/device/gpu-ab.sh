#!/usr/bin/env bash
# A/B of one switch in one device call: builds kilnc and the runtime library (as gpu-iterate.sh),
# then runs bench/gpu/bench.py's kiln backend with the arguments given, alternately with side A's
# switch and without it (B), ROUNDS times each (default 2), and prints each row's medians per side
# and B's speedup. Side A: AB_FLAGS, kilnc flags (a builder switch, recorded in the plan:
# AB_FLAGS="--switch gemm_timing=off"), or AB_ENV, an environment variable (AB_ENV=
# KILN_CUDA_GRAPHS=0), or AB_TREE, another source tree
# (a checkout of an earlier commit inside the working tree, so the call carries it: side A runs
# its kilnc and runtime: `git worktree add ab-base COMMIT`, AB_TREE=ab-base).
# Example: AB_FLAGS="--switch excitation_projection=off" gpu-ab.sh --models efficientnet_b0 \
#            --batches 1,32 --precisions fp16,fp32
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
build=${BUILD_DIR:-build-gpu}
out=${OUT:-/tmp}
logs=/tmp/kiln-ab
mkdir -p "$logs"
ab_env=${AB_ENV:-}
ab_flags=${AB_FLAGS:-}
ab_tree=${AB_TREE:-}
[ -n "$ab_env$ab_flags$ab_tree" ] ||
  { echo "gpu-ab: set AB_FLAGS (kilnc flags), AB_ENV (NAME=VALUE) or AB_TREE (a source tree) for side A" >&2; exit 2; }
source tools/device/common.sh
configure_gpu_build "$build" "$logs/configure.log" || exit 1
cmake --build "$build" -j "$(nproc)" --target kilnc kiln_runtime >"$logs/build.log" 2>&1 ||
  { grep -B5 -A20 "error" "$logs/build.log" | head -80; exit 1; }
check_runtime_libstdcxx "$build/lib/libkiln_runtime.so" || exit 1
a_build=$build
if [ -n "$ab_tree" ]; then
  # The other tree builds with this one's .deps (its own may be missing).
  [ -e "$ab_tree/.deps" ] || ln -s "$PWD/.deps" "$ab_tree/.deps"
  (cd "$ab_tree" && source tools/device/common.sh && configure_gpu_build build-gpu "$logs/configure_a.log" &&
    cmake --build build-gpu -j "$(nproc)" --target kilnc kiln_runtime >"$logs/build_a.log" 2>&1) ||
    { grep -B5 -A20 "error" "$logs/build_a.log" | head -80; exit 1; }
  a_build=$ab_tree/build-gpu
fi
rows="$out/ab_rows.jsonl"
: >"$rows"
for round in $(seq "${ROUNDS:-2}"); do
  for side in A B; do
    mkdir -p "$logs/$side"
    envs=() flags="" bin=$build
    if [ "$side" = A ]; then
      [ -n "$ab_env" ] && envs=("$ab_env")
      flags=$ab_flags
      bin=$a_build
    fi
    env "${envs[@]}" PYTHONUNBUFFERED=1 "$py" bench/gpu/bench.py --via kilnc --kilnc "$bin/bin/kilnc" \
      --runtime "$bin/lib/libkiln_runtime.so" --out "$logs/$side" --backends kiln \
      --kilnc-flags="$flags" "$@" 2>&1 |
      grep '^{' | sed "s/^{/{\"side\": \"$side\", \"round\": $round, /" >>"$rows"
  done
done
"$py" - "$rows" "$ab_env $ab_flags ${ab_tree:+tree $ab_tree}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = sorted({(r["model"], r["precision"], r["batch"]) for r in rows})
print(f"A: {sys.argv[2]}   B: without it   (median ms per round; B's speedup on the medians)")
for k in keys:
    side = {s: [r.get("median") for r in rows if (r["model"], r["precision"], r["batch"]) == k
                and r["side"] == s] for s in "AB"}
    if any(v is None for s in "AB" for v in side[s]) or not side["A"] or not side["B"]:
        errs = [r.get("error") for r in rows if (r["model"], r["precision"], r["batch"]) == k]
        print(k, "error:", errs)
        continue
    a, b = statistics.median(side["A"]), statistics.median(side["B"])
    fmt = lambda v: " ".join(f"{x:.3f}" for x in v)
    print(f"{k[0]:16s} {k[1]} b{k[2]:<3d} A {fmt(side['A'])}  B {fmt(side['B'])}  B/A {a / b:.3f}x")
PY
