#!/usr/bin/env bash
# Per-layer profiles of a dynamic engine against a static one at the same shape (issue #30):
# exports a text model of bench/models.py with a dynamic sequence (1..512) and at SEQ, compiles
# both with kilnc (cuda, f16, --save-engine) and runs `kiln-run --profile` at SEQ, printing the
# TOP layers of each. Usage (device, after gpu-iterate.sh built build-gpu):
#   MODEL=hf_bert SEQ=512 TOP=25 bash tools/device/profile_dynamic.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${MODEL:-hf_bert} seq=${SEQ:-512} top=${TOP:-25} build=${BUILD_DIR:-build-gpu}
dir=$(mktemp -d)
python3 - "$model" "$seq" "$dir" <<'PY'
import sys, torch
sys.path.insert(0, "bench")
from models import make_model, padded_batch
name, seq, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
model, _ = make_model(name, mask=True)
ids, mask = padded_batch(model.model.config.vocab_size, 1, seq)
dim = torch.export.Dim("seq", min=1, max=512)
torch.export.save(torch.export.export(model, (ids, mask), dynamic_shapes=({1: dim}, {1: dim})),
                  f"{out}/dynamic.pt2")
torch.export.save(torch.export.export(model, (ids, mask)), f"{out}/static.pt2")
PY
spec="[(1,1);(1,128);(1,512)]@i64"
"$build/bin/kilnc" "$dir/dynamic.pt2" "$dir/dynamic.plan" "$spec" "$spec" --device cuda -p f16 -p f32 --save-engine -q
"$build/bin/kilnc" "$dir/static.pt2" "$dir/static.plan" --device cuda -p f16 -p f32 --save-engine -q
# The inputs' names, as the static plan prints them.
shapes=$("$build/bin/kiln-run" "$dir/static.plan" --device cuda --iterations 1 |
  sed -n "s/^input \([^:]*\):.*/\1:1x$seq/p" | paste -sd,)
for kind in static dynamic; do
  echo "== $model $kind at seq $seq ($shapes)"
  "$build/bin/kiln-run" "$dir/$kind.plan" --device cuda --shapes "$shapes" --profile \
    --warmup 20 --iterations 50 >"$dir/$kind.txt"
  grep -v "^output\|^input" "$dir/$kind.txt" | head -$((top + 3))
  # Time per kind of layer, and the number of layers run.
  awk '/^layer /{on=1; next} on && NF>=4 {t[$2]+=$3; n[$2]++} END {for (k in t)
    printf "  %-20s %3d layers %8.4f ms\n", k, n[k], t[k]}' "$dir/$kind.txt" | sort -k4 -nr
done
