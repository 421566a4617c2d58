#!/usr/bin/env bash
# Whether two source trees build the same plans: builds kilnc and kiln-run in this tree and in
# AB_TREE (default ab-base: `git worktree add ab-base COMMIT`, carried with the call), compiles
# vit_b_16 and bert (batch 1, fp16, cuda) with each, and compares the layers of the two plans
# (kiln-run --inspect). For restructurings that must not change what runs.
set -e
cd "$(dirname "$0")/../.."
py=python3
tree=${AB_TREE:-ab-base}
export LD_LIBRARY_PATH=$PWD/.deps/lib:${LD_LIBRARY_PATH:-}
[ -e "$tree/.deps" ] || ln -s "$PWD/.deps" "$tree/.deps"
for t in . "$tree"; do (cd $t && source tools/device/common.sh && configure_gpu_build build-gpu /tmp/conf_$RANDOM.log && cmake --build build-gpu -j16 --target kiln-run kilnc >/tmp/build_plan_diff.log 2>&1) || { echo "build $t failed"; tail -20 /tmp/build_plan_diff.log; }; done
python3 - <<'PY'
import sys, torch
sys.path.insert(0, "bench")
from models import make_model
for name, b in (("vit_b_16", 1), ("bert", 1)):
    torch.manual_seed(0)
    m, mk = make_model(name)
    x = mk(b)
    torch.jit.trace(m, x, check_trace=False).save(f"/tmp/{name}.ts")
    spec = "(" + ",".join(map(str, x.shape)) + ")@" + ("i64" if x.dtype == torch.long else "f32")
    open(f"/tmp/{name}.spec", "w").write(spec)
PY
for name in vit_b_16 bert; do
  spec=$(cat /tmp/$name.spec)
  for t in . "$tree"; do
    tag=$( [ "$t" = . ] && echo new || echo old )
    $t/build-gpu/bin/kilnc /tmp/$name.ts /tmp/$name.$tag.plan "$spec" --device cuda -p f16 -p f32 --save-engine -q
    $t/build-gpu/bin/kiln-run /tmp/$name.$tag.plan --inspect --iterations 1 --warmup 0 > /tmp/$name.$tag.json 2>/dev/null || true
  done
  python3 - "$name" <<'PY'
import json, sys
name = sys.argv[1]
def load(tag):
    txt = open(f"/tmp/{name}.{tag}.json").read()
    j = json.JSONDecoder().raw_decode(txt[txt.index("{"):])[0]
    return j
a, b = load("old"), load("new")
la, lb = a["layers"], b["layers"]
print(name, "layers old", len(la), "new", len(lb), "identical" if la == lb else "DIFFER")
if la != lb:
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            print("first difference at", i); print(json.dumps(x)[:600]); print(json.dumps(y)[:600]); break
PY
done
