"""Dynamic shapes (issue #30): one kiln engine compiled for a range of shapes, against a static
kiln engine built for each shape and torch.compile with dynamic shapes, at the range's min, opt,
max and two shapes in between.

Per model and shape (fp16 unless --precision fp32; median ms of CUDA-event timed calls after
warm-up): kiln static (exported at that shape, compiled for it), kiln dynamic (exported with its
dims symbolic, compiled once for min/opt/max), torch.compile(dynamic=True) in its default mode and
in reduce-overhead, each compiled once and called at every shape. Also the first and second calls
of the dynamic engine at each shape (host wall time, synchronized: what a new shape costs; where
that is no profile point, kiln's engine chooses algorithms at a shape's second call) and the
largest difference from eager PyTorch in the same precision. kiln compiles through the Python
package from torch.export's programs, default flags, as a user would.

Usage (on the GPU machine, the package built with CUDA):
  python3 bench/gpu/dynamic.py --package-dir build-gpu/python --models resnet50,hf_bert --out $OUT
`--device cpu` runs the kiln columns on the CPU (a check of the script, not a measurement).
"hf_bert_batch_seq" is BertModel with the batch (1..32) and the sequence (1..512) dynamic in one
engine, the inputs' dims tied (one export Dim each).

`--interleave N` (default 8) then compiles the dynamic engine again and calls it at the shapes
that are no profile point in turn, N rounds (4, 20, 4, 20, ... for the image models), once per
--variants entry ("default"; "KILN_CUDA_TUNING_MS=unbounded", an environment variable for the
engine; "repeat_tuning=off", a kiln switch), each in a new process, and prints each call's host
wall time (synchronized) and the median after (CUDA events): a repeated shape chooses its
algorithms (within the budget, 10 ms a call by default, over its calls) and is captured as a CUDA
graph once all is chosen, whatever ran in between.
"""
import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from models import make_model, max_diff, padded_batch  # noqa: E402 (bench/models.py)
from bench import time_cuda  # noqa: E402 (beside this file)

# The dynamic dims, each with its axis and range (min, opt, max), and the shapes measured (one
# value per dim). Image models: the batch; text models: the sequence of padded requests (token ids
# and attention mask), of one request unless the batch is dynamic too (one engine for both).
BATCH = {"batch": (0, (1, 8, 32))}
CASES = {
    "resnet50": {"dims": BATCH, "points": (1, 4, 8, 20, 32)},
    "mobilenet_v2": {"dims": BATCH, "points": (1, 4, 8, 20, 32)},
    "resnet18": {"dims": BATCH, "points": (1, 4, 8, 20, 32)},
    "hf_bert": {"dims": {"seq": (1, (1, 128, 512))}, "points": (1, 64, 128, 300, 512),
                "batch": 1},
    "hf_bert_batch_seq": {"model": "hf_bert",
                          "dims": {"batch": (0, (1, 8, 32)), "seq": (1, (1, 128, 512))},
                          "points": ((1, 1), (1, 512), (4, 64), (8, 128), (16, 300), (32, 512))},
}
PEERS = {"torch.compile-dynamic": {"dynamic": True},
         "reduce-overhead-dynamic": {"dynamic": True, "mode": "reduce-overhead"}}


def values(point):
    """A point's value per dynamic dim."""
    return tuple(point) if isinstance(point, tuple) else (point,)


def label(point):
    return "x".join(str(v) for v in values(point))


def inputs_at(name, model, make_input, point):
    """The model's arguments (CPU) at one point: a value per dynamic dim."""
    case = CASES[name]
    at = dict(zip(case["dims"], values(point)))
    if "seq" not in at:
        x = make_input(at["batch"])
        return tuple(x) if isinstance(x, (tuple, list)) else (x,)
    torch.manual_seed(at["seq"] + 1000 * at.get("batch", 0))
    return padded_batch(model.model.config.vocab_size, at.get("batch", case.get("batch", 1)),
                        at["seq"])


def opt_point(case):
    opts = tuple(r[1] for _, r in case["dims"].values())
    return opts if len(opts) > 1 else opts[0]


def dynamic_shapes(name, args):
    """Every argument's dynamic dims, one torch.export.Dim each (shared: tied across inputs)."""
    dims = {d: (axis, torch.export.Dim(d, min=r[0], max=r[2]))
            for d, (axis, r) in CASES[name]["dims"].items()}
    return tuple({axis: dim for axis, dim in dims.values()} for _ in args)


def kiln_inputs(args, name=None, ranged=False):
    import kiln
    if not ranged:
        return [kiln.Input(shape=tuple(a.shape), dtype=a.dtype) for a in args]
    out = []
    for a in args:
        shapes = [list(a.shape) for _ in range(3)]
        for axis, r in CASES[name]["dims"].values():
            for i in range(3):
                shapes[i][axis] = r[i]
        out.append(kiln.Input(min_shape=tuple(shapes[0]), opt_shape=tuple(shapes[1]),
                              max_shape=tuple(shapes[2]), dtype=a.dtype))
    return out


def kiln_compile(source, inputs, device, dtype, switches=()):
    import kiln
    precisions = {dtype, torch.float32}
    return kiln.compile(source, inputs=inputs, device=device, enabled_precisions=precisions,
                        progress=False, **({"switches": list(switches)} if switches else {}))


def timed(fn, args, device, warmup, iters):
    """Median ms of fn(*args): bench.py's CUDA-event timing, wall clock on the CPU."""
    if device == "cuda":
        return time_cuda(fn, args, warmup, iters)["median"]
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn(*args)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def call_ms(fn, args, device):
    """fn(*args) and its host wall time in ms, synchronized."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn(*args)
    if device == "cuda":
        torch.cuda.synchronize()
    return out, (time.perf_counter() - start) * 1e3


def on(args, device, dtype):
    return tuple(a.to(device, dtype) if a.is_floating_point() else a.to(device) for a in args)


def kiln_args(args, device):
    """kiln's modules take f32 (with f16 allowed the engine casts at its boundary)."""
    return tuple(a.to(device) for a in args)


def load_case(name, args):
    """A case's device and dtype, its entry of CASES, the model's name, the model (eval, random
    weights, seeded) and its input maker."""
    device, dtype = args.device, torch.float16 if args.precision == "fp16" else torch.float32
    case = CASES[name]
    torch.manual_seed(0)
    model_name = case.get("model", name)
    model, make_input = make_model(model_name, mask=True, seq=case["dims"]["seq"][1][1]) \
        if "seq" in case["dims"] else make_model(model_name)
    return device, dtype, case, model_name, model.eval(), make_input


def bench_model(name, args, rows, save):
    """One model's rows against the peers. `save(partial_rows)` is called after each backend, so a
    run cut short by a time limit keeps the columns it finished."""
    device, dtype, case, model_name, model, make_input = load_case(name, args)
    points = {p: inputs_at(name, model, make_input, p) for p in case["points"]}
    opt_args = inputs_at(name, model, make_input, opt_point(case))
    eager = copy.deepcopy(model).to(device, dtype if device == "cuda" else torch.float32)
    rows_of = {p: {"model": model_name, "dim": "x".join(case["dims"]), "point": label(p),
                   "precision": args.precision}
               for p in case["points"]}
    with torch.no_grad():
        references = {p: eager(*on(x, device, eager_dtype(device, dtype)))
                      for p, x in points.items()}

        def record(backend, p, fn, call_args, first=None):
            row = rows_of[p]
            try:
                if first is not None:
                    row[f"{backend} first ms"] = first
                    out, row[f"{backend} second ms"] = call_ms(fn, call_args, device)
                else:
                    out = fn(*call_args)
                row[f"{backend} max diff"] = max_diff(out, references[p])
                row[f"{backend} ms"] = timed(fn, call_args, device, args.warmup, args.iters)
            except Exception as e:  # a backend that fails is a cell that says so
                row[f"{backend} error"] = str(e).strip().splitlines()[0][:160]
                traceback.print_exc()

        # kiln dynamic: one export with the dim symbolic, one compile for the range.
        start = time.time()
        try:
            ep = torch.export.export(model, opt_args,
                                     dynamic_shapes=dynamic_shapes(name, opt_args))
            dyn = kiln_compile(ep, kiln_inputs(opt_args, name, ranged=True), device, dtype)
            compile_s = time.time() - start
            for p, x in points.items():
                call_args = kiln_args(x, device)
                first = call_ms(dyn, call_args, device)[1]
                record("kiln-dynamic", p, dyn, call_args, first)
                rows_of[p]["kiln-dynamic compile s"] = compile_s
            del dyn
        except Exception as e:
            for p in points:
                rows_of[p]["kiln-dynamic error"] = str(e).strip().splitlines()[0][:160]
            traceback.print_exc()
        save(list(rows_of.values()))
        # kiln static: exported and compiled at each shape.
        for p, x in points.items():
            try:
                start = time.time()
                static = kiln_compile(torch.export.export(model, x), kiln_inputs(x), device,
                                      dtype)
                rows_of[p]["kiln-static compile s"] = time.time() - start
                record("kiln-static", p, static, kiln_args(x, device))
                del static
            except Exception as e:
                rows_of[p]["kiln-static error"] = str(e).strip().splitlines()[0][:160]
                traceback.print_exc()
        save(list(rows_of.values()))
        # torch.compile with dynamic shapes, compiled once, called at every shape.
        if device == "cuda":
            for peer, options in PEERS.items():
                if peer not in args.peers.split(","):
                    continue
                torch._dynamo.reset()
                fn = torch.compile(copy.deepcopy(eager), **options)
                for p, x in points.items():
                    call_args = on(x, device, dtype)
                    try:
                        first = call_ms(fn, call_args, device)[1]
                    except Exception as e:
                        rows_of[p][f"{peer} error"] = str(e).strip().splitlines()[0][:160]
                        continue
                    record(peer, p, fn, call_args, first)
                del fn
                save(list(rows_of.values()))
                torch.cuda.empty_cache()
    for p in case["points"]:
        rows.append(rows_of[p])
        print(json.dumps(rows_of[p]), flush=True)


def interleaved(name, args, rows):
    """Calls of one dynamic engine at the shapes that are no profile point, in turn: host wall
    ms of each call, then the median of CUDA-event timed calls, per variant (--variants). Each
    variant runs in a process of its own (this script again, --in-process), so that none finds
    the kernels' modules loaded or algorithms chosen by what ran before it."""
    if not args.in_process:
        for variant in args.variants.split(","):
            with tempfile.TemporaryDirectory(prefix="kiln_dynamic_") as out:
                cmd = [sys.executable, os.path.abspath(__file__), "--models", name,
                       "--package-dir", args.package_dir, "--device", args.device,
                       "--precision", args.precision, "--interleave", str(args.interleave),
                       "--interleave-only", "--in-process", "--variants", variant, "--out", out]
                r = subprocess.run(cmd, capture_output=True, text=True)
            got = [json.loads(line) for line in r.stdout.splitlines()
                   if line.startswith("{") and '"variant"' in line]
            if r.returncode != 0 or not got:
                print(f"{name} {variant}: the interleaved run failed (exit {r.returncode}):\n"
                      + (r.stderr or r.stdout)[-1500:], flush=True)
            for row in got:
                rows.append(row)
                print(json.dumps(row), flush=True)
        return
    device, dtype, case, model_name, model, make_input = load_case(name, args)
    ranges = [r for _, r in case["dims"].values()]
    profile = {tuple(r[i] for r in ranges) for i in range(3)}
    chosen = [p for p in case["points"] if values(p) not in profile]
    points = {p: kiln_args(inputs_at(name, model, make_input, p), device) for p in chosen}
    opt_args = inputs_at(name, model, make_input, opt_point(case))
    for variant in args.variants.split(","):
        env, switches = {}, []
        if variant.startswith("KILN_"):
            key, _, value = variant.partition("=")
            env[key] = value
        elif variant != "default":
            switches.append(variant)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            with torch.no_grad():
                ep = torch.export.export(model, opt_args,
                                         dynamic_shapes=dynamic_shapes(name, opt_args))
                dyn = kiln_compile(ep, kiln_inputs(opt_args, name, ranged=True), device, dtype,
                                   switches)
                calls = {p: [] for p in chosen}
                for _ in range(args.interleave):
                    for p in chosen:
                        calls[p].append(call_ms(dyn, points[p], device)[1])
                after = {p: timed(dyn, points[p], device, 5, 50) for p in chosen}
                del dyn
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v
        for p in chosen:
            row = {"model": model_name, "point": label(p), "variant": variant,
                   "calls ms": calls[p], "after ms": after[p]}
            rows.append(row)
            print(json.dumps(row), flush=True)


def interleaved_table(rows):
    if not rows:
        return ""
    n = max(len(r["calls ms"]) for r in rows)
    lines = ["| model | shape | variant | "
             + " | ".join(f"call {i + 1}" for i in range(n)) + " | median after ms |",
             "|---|---|---|" + "---|" * (n + 1)]
    for r in rows:
        lines.append(f"| {r['model']} | {r['point']} | {r['variant']} | "
                     + " | ".join(f"{v:.2f}" for v in r["calls ms"])
                     + f" | {r['after ms']:.3f} |")
    return "\n".join(lines)


def eager_dtype(device, dtype):
    return dtype if device == "cuda" else torch.float32


def fmt(row, key):
    v = row.get(key)
    return "" if v is None else f"{v:.3f}"


def table(rows):
    lines = ["| model | dynamic dim | shape | kiln static ms | kiln dynamic ms | dynamic / static "
             "| torch.compile dynamic ms | reduce-overhead dynamic ms | speed-up vs best peer "
             "| kiln dynamic first / second call ms | max diff dynamic / static |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        dyn, static = r.get("kiln-dynamic ms"), r.get("kiln-static ms")
        peers = [r[f"{p} ms"] for p in PEERS if f"{p} ms" in r]
        ratio = f"{dyn / static:.2f}x" if dyn and static else ""
        speedup = f"{min(peers) / dyn:.2f}x" if dyn and peers else ""
        errors = "; ".join(f"{k}: {v}" for k, v in r.items() if k.endswith("error"))
        lines.append(
            f"| {r['model']} | {r['dim']} | {r['point']} | {fmt(r, 'kiln-static ms')} | "
            f"{fmt(r, 'kiln-dynamic ms')} | {ratio} | {fmt(r, 'torch.compile-dynamic ms')} | "
            f"{fmt(r, 'reduce-overhead-dynamic ms')} | {speedup} | "
            f"{fmt(r, 'kiln-dynamic first ms')} / {fmt(r, 'kiln-dynamic second ms')} | "
            f"{r.get('kiln-dynamic max diff', float('nan')):.1e} / "
            f"{r.get('kiln-static max diff', float('nan')):.1e} |"
            + (f" {errors}" if errors else ""))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet50,mobilenet_v2,hf_bert,hf_bert_batch_seq",
                   help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--package-dir", default="build/python")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--precision", default="fp16", choices=["fp16", "fp32"])
    p.add_argument("--peers", default=",".join(PEERS),
                   help="torch.compile peers (cuda only), comma-separated, of "
                        + ", ".join(PEERS))
    p.add_argument("--interleave", type=int, default=8,
                   help="rounds of calls at the shapes that are no profile point, in turn, on "
                        "a new dynamic engine (0: none)")
    p.add_argument("--interleave-only", action="store_true",
                   help="only the interleaved calls (no table of shapes against the peers)")
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--variants", default="default,KILN_CUDA_TUNING_MS=unbounded,repeat_tuning=off",
                   help="engines for --interleave, comma-separated: default, an environment "
                        "variable KILN_...=VALUE, or a kiln switch")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args()
    for name in args.models.split(","):
        if name not in CASES:
            p.error(f"unknown model {name} (known: {', '.join(CASES)})")
    sys.path.insert(0, os.path.abspath(args.package_dir))
    import kiln  # noqa: F401
    if args.device == "cuda":
        torch.backends.cudnn.benchmark = True
        print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows, interleaved_rows = [], []
    os.makedirs(args.out, exist_ok=True)

    def save(partial=()):
        """The table so far (and a model's partial rows): a run cut short keeps what it did."""
        text = table(rows + list(partial))
        if interleaved_rows:
            text += ("\n\nInterleaved calls (host wall ms, synchronized) of a new dynamic engine "
                     "at the shapes that are no profile point, in turn:\n\n"
                     + interleaved_table(interleaved_rows))
        with open(os.path.join(args.out, "dynamic.json"), "w") as f:
            json.dump(rows + list(partial), f, indent=1)
        with open(os.path.join(args.out, "dynamic.md"), "w") as f:
            f.write(text + "\n")
        return text

    for name in args.models.split(","):
        if not args.interleave_only:
            bench_model(name, args, rows, save)
        if args.interleave > 0:
            interleaved(name, args, interleaved_rows)
        print(save(), flush=True)

if __name__ == "__main__":
    main()
