#!/usr/bin/env python3
"""Compile times with the engine cache and refit (issue #33), through the Python package as a user
would, for the benchmark models (bench/models.py) on one device:

  compile            kiln.compile with default settings
  compile, cached    the same with engine_cache into an empty directory (engines: cache miss,
                     or skip: a CPU plan holding weights is stored only when building took
                     longer than reading it back would; the compiled module is stored whole),
                     then again: the compiled module loaded from the cache ("warm %": that
                     second compile over the first, uncached one)
  refittable         kiln.compile(refittable=True) with engine_cache: first (miss), then again
                     with new weights (a hit on the weightless entry, refit on load)
  refit              kiln.refit of the refittable module with new weights
  phases             where the second cached compile and the refittable hit spent their time
  run                the median latency of the default and the refittable engines (what
                     refittable costs: no batch-norm folding, no channels-last weights)

Every module is traced first (the times are kiln.compile's, not torch.jit.trace's). Prints a
markdown table and checks that every refit or cached module answers as the model does.

  .venv/bin/python bench/compile_cache.py --models resnet50,hf_bert --device cpu
"""
import argparse
import copy
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import latency_ms, make_model, max_diff  # noqa: E402

import kiln  # noqa: E402


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - start) * 1e3


def tuned(model):
    """The model with new weights, as a fine-tune leaves them."""
    out = copy.deepcopy(model)
    torch.manual_seed(1)
    with torch.no_grad():
        for t in list(out.parameters()) + [b for b in out.buffers() if b.is_floating_point()]:
            t.mul_(torch.rand_like(t) * 0.2 + 0.9)
    return out


def phases(compiled):
    """Where kiln.compile's time went, phase by phase (ms)."""
    return " ".join(f"{p['phase']} {p['ms']:.0f}" for p in compiled.kiln_report["phases"])


def plans(compiled):
    return ",".join(s["plan"] for s in compiled.kiln_report["segments"] if s["target"] == "engine")


def run(name, batch, device):
    model, make_input = make_model(name)
    x = make_input(batch)
    model_t = tuned(model)
    with torch.no_grad():
        script = torch.jit.trace(model, (x,), check_trace=False, strict=False)
        script_t = torch.jit.trace(model_t, (x,), check_trace=False, strict=False)
        want, want_t = model(x), model_t(x)
    xd = x.to(device)
    opts = {"inputs": [x], "device": device}
    row = {"model": name}
    default, row["compile"] = timed(lambda: kiln.compile(script, **opts))
    with tempfile.TemporaryDirectory() as cache:
        first, row["cached 1st"] = timed(lambda: kiln.compile(script, engine_cache_dir=cache, **opts))
        second, row["cached 2nd"] = timed(
            lambda: kiln.compile(script, engine_cache_dir=cache, **opts))
        row["cached plans"] = plans(first) + " / " + plans(second)
        row["2nd: phases"] = phases(second)
        row["warm %"] = f"{100 * row['cached 2nd'] / row['compile']:.1f}%"
    with tempfile.TemporaryDirectory() as cache:
        refittable, row["refittable 1st"] = timed(
            lambda: kiln.compile(script, refittable=True, engine_cache_dir=cache, **opts))
        hit, row["refittable, new weights"] = timed(
            lambda: kiln.compile(script_t, refittable=True, engine_cache_dir=cache, **opts))
        row["refittable plans"] = plans(refittable) + " / " + plans(hit)
        row["hit: phases"] = phases(hit)
    refitted, row["refit"] = timed(lambda: kiln.refit(refittable, script_t))
    with torch.no_grad():
        scale = want_t.abs().max().item()
        row["max diff"] = max(max_diff(refitted(xd).cpu(), want_t), max_diff(hit(xd).cpu(), want_t),
                              max_diff(second(xd).cpu(), want)) / scale
    row["run ms"] = latency_ms(default, xd, device)
    row["run ms refittable"] = latency_ms(refittable, xd, device)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="resnet50,hf_bert")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    keys = ["model", "compile", "cached 1st", "cached 2nd", "warm %", "cached plans", "2nd: phases",
            "refittable 1st",
            "refittable, new weights", "refittable plans", "hit: phases", "refit", "run ms", "run ms refittable",
            "max diff"]
    print(f"device {args.device}, batch {args.batch}, torch {torch.__version__}; times in ms "
          f"(kiln.compile / kiln.refit wall clock), max diff relative to the output's max")
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for name in args.models.split(","):
        try:
            row = run(name, args.batch, args.device)
            cells = [row[k] if isinstance(row[k], str) else
                     (f"{row[k]:.1e}" if k == "max diff" else f"{row[k]:.0f}"
                      if not k.startswith("run") else f"{row[k]:.2f}") for k in keys]
        except Exception as e:  # noqa: BLE001 (a row that says why)
            cells = [name, f"FAILED: {str(e).splitlines()[0][:100]}"] + [""] * (len(keys) - 2)
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
