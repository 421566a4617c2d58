#!/usr/bin/env bash
# Where kiln's compile time goes, per bench/gpu model: the CPU trace, kilnc's phases (its summary
# line) and the load of the compiled module, the three parts bench.py's "compile s" adds up.
# Usage: compile-times.sh MODEL:BATCH[:fp32] ...   (default: bert:32 vit_b_16:32 resnet50:32)
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
build=${BUILD_DIR:-build-gpu}
out=${OUT:-/tmp}
source tools/device/common.sh
configure_gpu_build "$build" "$out/ct_configure.log" || exit 1
cmake --build "$build" -j "$(nproc)" --target kilnc kiln_runtime >"$out/ct_build.log" 2>&1 ||
  { grep -B5 -A20 "error" "$out/ct_build.log" | head -80; exit 1; }
[ $# -gt 0 ] || set -- bert:32 vit_b_16:32 resnet50:32
PYTHONUNBUFFERED=1 "$py" - "$build" "$@" <<'PY'
import os, subprocess, sys, tempfile, time
sys.path.insert(0, "bench/gpu")
import torch
from bench import make_model
build = sys.argv[1]
torch.ops.load_library(f"{build}/lib/libkiln_runtime.so")
tmp = tempfile.mkdtemp()
for item in sys.argv[2:]:
    name, batch, *prec = item.split(":")
    model, make_input = make_model(name)
    x = make_input(int(batch))
    ts, out = f"{tmp}/{name}.ts", f"{tmp}/{name}.kiln.ts"
    t = time.time()
    with torch.no_grad():
        torch.jit.trace(model.eval(), x, check_trace=False).save(ts)
    trace_s = time.time() - t
    spec = "(" + ",".join(map(str, x.shape)) + ")@" + ("i64" if x.dtype == torch.long else "f32")
    flags = [] if prec == ["fp32"] else ["-p", "f16", "-p", "f32"]
    t = time.time()
    r = subprocess.run([f"{build}/bin/kilnc", ts, out, spec, "--device", "cuda", *flags],
                       capture_output=True, text=True)
    kilnc_s = time.time() - t
    t = time.time()
    torch.jit.load(out)
    load_s = time.time() - t
    print(f"== {item}: trace {trace_s:.2f} s, kilnc {kilnc_s:.2f} s, load {load_s:.2f} s")
    print("\n".join(l for l in r.stdout.splitlines() if "time:" in l or "built in" in l))
    if r.returncode:
        print(r.stderr[-2000:])
PY
