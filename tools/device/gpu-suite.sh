#!/usr/bin/env bash
# The whole GPU suite (bench/models.py SUITE, issue #28) on a machine of several GPUs, over more
# than one device call: each GPU runs its own bench/gpu/bench.py processes, one model at a time,
# taking the next model from one shared queue, so a run of 31 models x 2 precisions x 2 batches
# takes a quarter of the time on 4 GPUs. Rows from different GPUs of one machine are comparable
# (same model of card); each row's kiln/torch.compile pair comes from one process on one GPU.
#
#   gpu-suite.sh start [MODELS] -- [bench.py args]   build, then start the workers detached
#                                                     (setsid) and return; MODELS: comma list or
#                                                     "suite" (default); PRECISIONS="fp16 fp32"
#                                                     (default): every model in the first, then
#                                                     every model in the next (so a run cut short
#                                                     has whole precisions); bench args must not
#                                                     name --precisions; EXTRA="m:fp32,...": more
#                                                     model:precision runs queued after those
#   gpu-suite.sh wait SECONDS                        wait for the workers (at most SECONDS), then
#                                                     copy what they have to $OUT: suite.json
#                                                     (every row so far), suite.md, the logs
#
# The workers live until the machine goes back, and it goes back after idle_release_s (30 s) with
# no call running: put `wait` in the same call as `start`
#   PRECISIONS=fp16 gpu-suite.sh start M1,M2 -- --batches 1,32 ...; gpu-suite.sh wait 400
# and any later `wait` call at once after the last reply (session 22 lost a 9-minute wait on a
# fresh machine to a pause between calls). Needs .deps/ (tools/device/pack-deps.sh), carried.
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
build=${BUILD_DIR:-build-gpu}
out=${OUT:-/tmp}
work=/tmp/kiln-suite
cmd=${1:-}
EXTRA=${EXTRA:-}
shift || true

# Heaviest first (longest compile and run), so that no GPU is left with a big model at the end
# of a precision.
HEAVY="vgg16 wide_resnet50_2 maxvit_t r3d_18 fcn_resnet50 swin_t convnext_small hf_gpt2 hf_bert
       vit_b_16 hf_vit bert hf_llama resnet101 inception_v3 densenet121 efficientnet_v2_s
       hf_distilbert hf_clip_text"

start_suite() {
  local models=${1:-suite}
  shift || true
  [ "${1:-}" = "--" ] && shift
  # Cleared first, so that a start that fails leaves no earlier queue for `wait` to wait on.
  rm -rf "$work" && mkdir -p "$work"
  source tools/device/common.sh
  local t0
  t0=$(date +%s)
  configure_gpu_build "$build" "$work/configure.log" || exit 1
  cmake --build "$build" -j "$(nproc)" --target kilnc kiln_runtime kiln_python_package \
    >"$work/build.log" 2>&1 || { grep -B5 -A20 "error" "$work/build.log" | head -80; exit 1; }
  echo "build: $(($(date +%s) - t0)) s"
  check_runtime_libstdcxx "$build/lib/libkiln_runtime.so" || exit 1
  if [ "$models" = suite ]; then
    models=$("$py" -c 'import sys; sys.path.insert(0, "bench"); from models import SUITE; print(",".join(SUITE))')
  fi
  # The queue: heavy models first, then the rest in the given order.
  local m p order=()
  for m in $HEAVY; do [[ ",$models," == *",$m,"* ]] && order+=("$m"); done
  for m in ${models//,/ }; do [[ " ${order[*]} " == *" $m "* ]] || order+=("$m"); done
  : >"$work/queue"
  for p in ${PRECISIONS:-fp16 fp32}; do
    for m in "${order[@]}"; do echo "$m $p" >>"$work/queue"; done
  done
  # EXTRA="hf_bert:fp32,hf_vit:fp32": more model-precision runs after those.
  local e
  for e in ${EXTRA//,/ }; do echo "${e%%:*} ${e##*:}" >>"$work/queue"; done
  echo 0 >"$work/next"
  : >"$work/bench_args"
  [ $# -eq 0 ] || printf '%s\n' "$@" >"$work/bench_args"
  local gpus
  gpus=$(nvidia-smi -L | wc -l)
  echo "$(wc -l <"$work/queue") model-precision runs on $gpus GPUs: ${order[*]}"
  for ((g = 0; g < gpus; g++)); do
    setsid nohup bash "$0" worker "$g" >"$work/worker$g.log" 2>&1 </dev/null &
  done
  sleep 2
}

# One GPU's loop: take the next queued model (under a lock), bench it, until the queue is empty.
worker() {
  local g=$1 i m p entry args=() gpus threads
  mapfile -t args <"$work/bench_args"
  gpus=$(nvidia-smi -L | wc -l)
  threads=$(($(nproc) / gpus))
  export CUDA_VISIBLE_DEVICES=$g PYTHONUNBUFFERED=1
  # Each worker its own inductor cache (processes compiling into one race) and its share of the
  # cores: unbounded, torch.compile's and kiln's compile threads made compiles 10-60x slower.
  export TORCHINDUCTOR_CACHE_DIR=$work/inductor$g TORCHINDUCTOR_COMPILE_THREADS=$threads
  export OMP_NUM_THREADS=$threads
  while true; do
    i=$(flock "$work/next" bash -c 'i=$(cat "$0"); echo $((i + 1)) >"$0"; echo "$i"' "$work/next")
    entry=$(sed -n "$((i + 1))p" "$work/queue")
    [ -n "$entry" ] || break
    read -r m p <<<"$entry"
    echo "== gpu $g: $m $p ($(date +%T))"
    mkdir -p "$work/rows/$m-$p"
    "$py" bench/gpu/bench.py --package-dir "$build/python" --kilnc "$build/bin/kilnc" \
      --runtime "$build/lib/libkiln_runtime.so" --out "$work/rows/$m-$p" --models "$m" \
      --precisions "$p" "${args[@]}" >"$work/rows/$m-$p/log" 2>&1
    echo "   rc $? ($(date +%T))"
  done
  echo "== gpu $g: done"
  touch "$work/done$g"
}

wait_suite() {
  local limit=${1:-540} t0 gpus
  t0=$(date +%s)
  # A failed start (build error, no .deps) queued nothing: say so at once instead of waiting out
  # the limit on device time.
  [ -s "$work/queue" ] || { echo "gpu-suite: nothing queued (did start fail?)" >&2; exit 1; }
  gpus=$(nvidia-smi -L | wc -l)
  while (($(date +%s) - t0 < limit)); do
    [ "$(ls "$work"/done* 2>/dev/null | wc -l)" -ge "$gpus" ] && break
    sleep 10
  done
  # Every row so far: finished models from their bench_gpu.json, running ones from their logs.
  "$py" - "$work" "$out" <<'EOF'
import glob, json, os, sys
sys.path.insert(0, "bench/gpu")
from merge_results import COLUMNS, geomean_lines, row_line
work, out = sys.argv[1:]
rows = []
for log in sorted(glob.glob(os.path.join(work, "rows", "*", "log"))):
    for line in open(log):
        if line.startswith("{"):
            rows.append(json.loads(line))
with open(os.path.join(out, "suite.json"), "w") as f:
    json.dump({"rows": rows}, f, indent=1)
timed = {(r["model"], r["batch"], r["precision"], r["backend"]): dict(r, run="this")
         for r in rows if "median" in r}
failed = [r for r in rows if "median" not in r]
lines = [row_line(r) for r in timed.values()] + [""] + geomean_lines(timed)
lines += [f"failed: {r['model']} b{r['batch']} {r['precision']} {r['backend']}: {r.get('error', '')}"
          for r in failed]
open(os.path.join(out, "suite.md"), "w").write(COLUMNS + "\n" + "\n".join(lines) + "\n")
print(f"{len(rows)} rows, {len(failed)} failed")
print("\n".join(geomean_lines(timed)))
EOF
  cat "$work"/worker*.log >"$out/workers.log"
  echo "queue: $(wc -l <"$work/queue") runs, $(ls "$work"/rows 2>/dev/null | wc -l) started after $(($(date +%s) - t0)) s"
  for f in "$work"/worker*.log; do tail -n 2 "$f"; done
}

case "$cmd" in
  start) start_suite "$@" ;;
  worker) worker "$@" ;;
  wait) wait_suite "$@" ;;
  *) echo "usage: gpu-suite.sh start [MODELS] -- [bench args] | wait SECONDS" >&2; exit 2 ;;
esac
