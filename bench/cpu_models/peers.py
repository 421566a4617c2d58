#!/usr/bin/env python3
"""kiln's CPU backend against the CPU runtimes users would pick, side by side in one process run.

For each model, thread count and batch it times, on the same input:
  eager         PyTorch eager (its oneDNN/MKL kernels), under inference_mode
  inductor      torch.compile with Inductor's CPU backend, default mode
  inductor-max  torch.compile(mode="max-autotune")
  onnxruntime   ONNX Runtime's CPU execution provider, all graph optimizations (torch.onnx export)
  openvino      OpenVINO's CPU plugin (converted from the PyTorch module), f32 inference precision
  kiln          kilnc --device cpu on the module traced with torch.jit.trace
and prints a markdown table: median ms (wall clock, after warm-up), the ratio of the best peer's
median to kiln's (> 1: kiln is faster), compile time, and the largest |difference| from eager's
f32 output. A peer that fails is a row that says why. JSON goes to --out.

Threads: every runtime gets the same count (torch.set_num_threads, which kiln's OpenMP shares;
ORT's intra-op pool; OpenVINO's INFERENCE_NUM_THREADS).

Needs build/bin/kilnc and build/lib/libkiln_runtime.so, and the bench extras
(scripts/requirements-bench.txt); `make bench-models` installs and builds them.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from models import input_spec, make_model, max_diff  # noqa: E402 (bench/models.py)

# The CPU zoo (bench/cpu_models's, at full size) and the transformers models of the issue.
DEFAULT_MODELS = ("resnet18,resnet50,mobilenet_v2,mobilenet_v3_small,efficientnet_b0,"
                  "regnet_y_400mf,convnext_tiny,densenet121,squeezenet1_1,shufflenet_v2_x1_0,"
                  "mnasnet0_5,googlenet,vit_b_16,hf_bert,hf_gpt2")
PEERS = ("eager", "inductor", "inductor-max", "onnxruntime", "openvino", "kiln")


def time_cpu(fn, x, warmup, min_runs, budget_s):
    for _ in range(warmup):
        fn(x)
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or (time.perf_counter() - start < budget_s and len(times) < 200):
        t0 = time.perf_counter()
        fn(x)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), len(times)


def compile_peer(peer, model, x, threads, tmp, tag, args):
    """Returns (callable taking x, info dict)."""
    if peer == "eager":
        return model, {}
    if peer in ("inductor", "inductor-max"):
        torch._dynamo.reset()
        mode = "max-autotune" if peer == "inductor-max" else None
        fn = torch.compile(model, mode=mode, dynamic=False)
        fn(x)
        return fn, {}
    if peer == "onnxruntime":
        import onnxruntime as ort
        path = os.path.join(tmp, tag + ".onnx")
        if not os.path.exists(path):
            export_onnx(model, x, path)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        return lambda t: torch.from_numpy(sess.run(None, {name: t.numpy()})[0]), {}
    if peer == "openvino":
        import openvino as ov
        core = ov.Core()
        converted = ov.convert_model(model, example_input=x)
        compiled = core.compile_model(converted, "CPU", {
            "INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": "f32"})
        request = compiled.create_infer_request()
        return lambda t: torch.from_numpy(request.infer([t.numpy()])[0].copy()), {}
    if peer == "kiln":
        path = os.path.join(tmp, tag + ".ts")
        out = os.path.join(tmp, tag + ".kiln.ts")
        report = os.path.join(tmp, tag + ".json")
        torch.jit.trace(model, x, check_trace=False).save(path)
        r = subprocess.run([args.kilnc, path, out, input_spec(x), "--device", "cpu", "--report",
                            report, "-q", *args.kilnc_flags.split()], capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise RuntimeError((r.stderr or r.stdout).strip()[-300:])
        with open(report) as f:
            rep = json.load(f)
        info = {"engines": sum(s["target"] == "engine" for s in rep["segments"]),
                "torch_ops": rep["torch_ops"]}
        return torch.jit.load(out), info
    raise ValueError(f"unknown peer {peer}")


def export_onnx(model, x, path):
    """The TorchScript-based exporter first (it takes every zoo model); the dynamo-based one
    where it fails."""
    try:
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    except Exception:  # noqa: BLE001 (the second exporter's error is the one reported)
        torch.onnx.export(model, (x,), path, dynamo=True)


def table(rows, peers):
    head = "| model | threads | batch | " + " | ".join(f"{p} ms" for p in peers) + \
           " | best peer | kiln / best | kiln max diff | kiln compile s |"
    lines = [head, "|" + "---|" * (len(peers) + 7)]
    groups = {}
    for r in rows:
        groups.setdefault((r["model"], r["threads"], r["batch"]), {})[r["peer"]] = r
    ratios = []
    for (model, threads, batch), by in groups.items():
        cells = []
        for p in peers:
            r = by.get(p, {})
            cells.append(f"{r['median']:.2f}" if "median" in r else
                         f"failed: {r.get('error', 'not run')[:40]}")
        timed = {p: r["median"] for p, r in by.items() if "median" in r and p != "kiln"}
        best = min(timed, key=timed.get) if timed else None
        k = by.get("kiln", {})
        ratio = ""
        if best and "median" in k:
            ratios.append(timed[best] / k["median"])
            ratio = f"{ratios[-1]:.2f}x"
        diff = f"{k['max_diff']:.1e}" if "max_diff" in k else ""
        comp = f"{k['compile_s']:.1f}" if "compile_s" in k else ""
        lines.append(f"| {model} | {threads} | {batch} | " + " | ".join(cells) +
                     f" | {best or ''} | {ratio} | {diff} | {comp} |")
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        lines.append(f"\nkiln against the best peer per row: geomean {geo:.2f}x over "
                     f"{len(ratios)} rows, {sum(r >= 1 for r in ratios)} rows at or above 1.0x")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=DEFAULT_MODELS)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--peers", default=",".join(PEERS))
    p.add_argument("--kilnc", default="build/bin/kilnc")
    p.add_argument("--runtime", default="build/lib/libkiln_runtime.so")
    p.add_argument("--kilnc-flags", default="",
                   help="more kilnc flags for kiln, e.g. '--switch squeeze_excitation=on'")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--min-runs", type=int, default=5)
    p.add_argument("--budget", type=float, default=3.0, help="seconds of timed runs per cell")
    p.add_argument("--out", default=".")
    args = p.parse_args()
    peers = args.peers.split(",")
    if "kiln" in peers:
        torch.ops.load_library(args.runtime)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "unknown CPU")
    print(f"# {cpu}, torch {torch.__version__}", flush=True)
    rows = []
    # Models and plans of every row (GBs over a run); removed when the run ends, even by an error.
    tmp_dir = tempfile.TemporaryDirectory(prefix="kiln_peers_")
    tmp = tmp_dir.name
    for name in args.models.split(","):
        torch.manual_seed(0)
        model, make_input = make_model(name)
        for batch in [int(b) for b in args.batches.split(",")]:
            x = make_input(batch)
            with torch.inference_mode():
                reference = model(x)
            for threads in [int(t) for t in args.threads.split(",")]:
                torch.set_num_threads(threads)
                for peer in peers:
                    row = {"model": name, "threads": threads, "batch": batch, "peer": peer}
                    try:
                        with torch.inference_mode():
                            start = time.time()
                            fn, info = compile_peer(peer, model, x, threads, tmp,
                                                    f"{name}_b{batch}", args)
                            row.update(info)
                            row["max_diff"] = max_diff(fn(x), reference)
                            row["compile_s"] = time.time() - start
                            row["median"], row["runs"] = time_cpu(
                                fn, x, args.warmup, args.min_runs, args.budget)
                    except Exception as e:  # noqa: BLE001 (a peer that fails is a row)
                        text = str(e).strip()
                        row["error"] = text.splitlines()[-1][:200] if text else repr(e)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "peers.json"), "w") as f:
        json.dump({"cpu": cpu, "torch": torch.__version__, "rows": rows}, f, indent=1)
    text = table(rows, peers)
    with open(os.path.join(args.out, "peers.md"), "w") as f:
        f.write(f"{cpu}, torch {torch.__version__}\n\n{text}\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
