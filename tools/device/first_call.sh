#!/usr/bin/env bash
# What a new shape costs a dynamic engine (issue #30 item 2): exports an image model of
# bench/models.py with a dynamic batch (1..32, opt 8), compiles it with kilnc (cuda, f16,
# --save-engine), and with kiln-run warms the engine at WARM batches (default the profile points
# 1, 8, 32), then profiles the first call at each NEW batch (host wall time of that call, and
# its per-layer device timeline: host set-up shows as gaps charged to the layer waiting for it),
# with the default plan (first calls' convolutions as patch GEMMs), one asking the heuristics at
# every new shape (reuse_algorithms=off), one keeping cuDNN's kept algorithms for first calls
# (first_call_gemm=off, the default before G60), and with CUDA modules loaded eagerly; each profile gives the host's enqueue time per layer too. Usage (device, after gpu-iterate.sh built
# build-gpu): MODEL=resnet50 NEW="4 20" TOP=12 bash tools/device/first_call.sh (PLANS="default"
# times only those of "default heuristic cudnn default-eager-modules default-warmed", the last
# run at the profile points first as a loaded kiln.Engine is (kiln-run --warm-profile-points); TOP=0 skips the profiles;
# CALL=2 profiles the second call at the new batch instead of the first (where a repeated shape
# chooses); PLANS="default unchosen" WARM="1" NEW="8 32" times first calls at profile points with
# the choices made while building and without them; KILN_CUDA_TUNING_MS bounds what a repeated call may spend choosing, 10 ms unset)
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${MODEL:-resnet50} top=${TOP:-12} build=${BUILD_DIR:-build-gpu} call=${CALL:-1}
warm=${WARM:-"1 8 32"} new=${NEW:-"4 20"}
dir=$(mktemp -d)
python3 - "$model" "$dir" <<'PY'
import sys, torch
sys.path.insert(0, "bench")
from models import make_model
name, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model, make_input = make_model(name)
x = make_input(8)
batch = torch.export.Dim("batch", min=1, max=32)
torch.export.save(torch.export.export(model.eval(), (x,), dynamic_shapes=({0: batch},)),
                  f"{out}/dynamic.pt2")
print("input", "x".join(str(d) for d in x.shape[1:]))
PY
rest=$(python3 -c "import sys; sys.path.insert(0, 'bench'); from models import make_model; \
m, f = make_model('$model'); print('x'.join(str(d) for d in f(1).shape[1:]))")
spec="[(1x$rest);(8x$rest);(32x$rest)]"
spec=${spec//x/,}
# The plans PLANS names (and the default one): default; heuristic, asking the heuristics at every
# new shape (reuse_algorithms=off); cudnn, first calls running 2-d convolutions on cuDNN with the
# algorithms kept (first_call_gemm=off); unchosen, no choices made while building
# (choose_at_build=off: the first calls at the profile points choose).
declare -A switch_of=([default]="" [heuristic]=reuse_algorithms=off [cudnn]=first_call_gemm=off
  [unchosen]=choose_at_build=off)
for plan in default ${PLANS:-default heuristic cudnn}; do
  plan=${plan%-eager-modules}
  plan=${plan%-warmed}
  [ -f "$dir/$plan.plan" ] && continue
  sw=${switch_of[$plan]-}
  "$build/bin/kilnc" "$dir/dynamic.pt2" "$dir/$plan.plan" "$spec" --device cuda -p f16 -p f32 \
    --save-engine -q ${sw:+--switch "$sw"}
done
name=$("$build/bin/kiln-run" "$dir/default.plan" --device cuda --iterations 1 |
  sed -n "s/^input \([^:]*\):.*/\1/p" | head -1)
warm_spec=""
for b in $warm; do warm_spec+="${warm_spec:+;}$name:${b}x$rest"; done
run() {  # PLAN BATCH WARMUP ITERATIONS [ARGS...]: kiln-run after the warm shapes
  local plan=$1 b=$2 w=$3 n=$4
  shift 4
  "$build/bin/kiln-run" "$dir/$plan.plan" --device cuda --warmup-shapes "$warm_spec" \
    --shapes "$name:${b}x$rest" --warmup "$w" --iterations "$n" "$@"
}
echo "$model: ms of the first call at a new batch after calls at $warm (host wall time), of the"
echo "second (a repeated shape tunes: Resources::tune), and of later calls there (median of 20,"
echo "eager: kiln-run runs without CUDA graphs)"
echo "| plan | batch | first call ms | second call ms | later calls ms |"
echo "|---|---|---|---|---|"
for plan in ${PLANS:-default heuristic cudnn default-eager-modules}; do
  file=${plan%-eager-modules} loading=LAZY warm_args=()
  file=${file%-warmed}
  [ "$plan" = default-eager-modules ] && loading=EAGER
  [ "$plan" = default-warmed ] && warm_args=(--warm-profile-points)
  for b in $new; do
    first=$(CUDA_MODULE_LOADING=$loading run "$file" "$b" 0 1 "${warm_args[@]}" |
      sed -n 's/^latency.*median \([0-9.]*\).*/\1/p')
    second=$(CUDA_MODULE_LOADING=$loading run "$file" "$b" 1 1 "${warm_args[@]}" |
      sed -n 's/^latency.*median \([0-9.]*\).*/\1/p')
    later=$(CUDA_MODULE_LOADING=$loading run "$file" "$b" 3 20 "${warm_args[@]}" |
      sed -n 's/^latency.*median \([0-9.]*\).*/\1/p')
    echo "| $plan | $b | $first | $second | $later |"
  done
done
# Where a first call's time goes (per-layer device timeline: host set-up shows as gaps charged
# to the layer that waited for it; cuDNN calls that synchronize stall on the profiler's gate),
# and the host's side of it: each layer's enqueue time, by kind and slowest first.
plans=(default)
[ -f "$dir/cudnn.plan" ] && plans+=(cudnn)
[ "$top" -gt 0 ] || plans=()
for plan in "${plans[@]}"; do
  b=${new%% *}
  echo "== $plan plan, batch $b, call $call at that batch, top $top layers"
  run "$plan" "$b" $((call - 1)) 1 --profile >"$dir/profile.txt"
  grep -v "^output\|^input\|^activation" "$dir/profile.txt" | head -$((top + 3))
  # Host time: the layers' enqueue (set-up at the new shape and launch) by kind, and shapes.
  grep "^total\|^shapes resolved\|^host ms" "$dir/profile.txt"
  echo "slowest on the host:"
  grep -v "^output\|^input\|^activation\|^total\|^shapes\|^host\|^layer" "$dir/profile.txt" |
    sort -k5 -g -r | head -"$top"
done
