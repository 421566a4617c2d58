#!/usr/bin/env python3
"""Peak memory of kiln's engine builds, and what resource partitioning (issue #34) does to it.

For each model (bench/models.py), traced, compiled with kiln.compile's defaults on one device:

  weights      bytes of the module's parameters and buffers (what the engines hold)
  convert peak the process's peak RSS from the start of the convert phase (conversion and build
               of every engine, the plans loaded into their engines) to the end of the compile,
               above its RSS when the phase began: Linux's VmHWM, reset through clear_refs
  multiplier   convert peak / weights: what engine::kBuildMemoryMultiplier should be
  then, with enable_resource_partitioning and a cpu_memory_budget meant to give 2, 3 and 4 pieces
  (weights x kiln::kBuildMemoryMultiplier / pieces, plus 5%): the engines made, the convert peak, the
  median latency against the default's, and the largest difference of the outputs.

  .venv/bin/python bench/build_memory.py --models vgg16,resnet50 --device cpu
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import latency_ms, make_model, max_diff  # noqa: E402

import kiln  # noqa: E402
from kiln import _compile  # noqa: E402

MULTIPLIER = kiln._kiln.BUILD_MEMORY_MULTIPLIER  # kiln::kBuildMemoryMultiplier


def status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {key}")


class PhaseMemory:
    """Patches kiln's progress callback: at the convert phase, notes RSS and resets the peak."""

    def __init__(self):
        self.start_kib = None

    def __enter__(self):
        original = _compile._Progress.__call__
        self.original = original
        tracker = self

        def call(bar, phase, detail):
            if phase == "convert":
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")
                tracker.start_kib = status_kib("VmRSS")
            return original(bar, phase, detail)

        _compile._Progress.__call__ = call
        return self

    def __exit__(self, *exc):
        _compile._Progress.__call__ = self.original

    def peak_bytes(self):
        # 0 when the phase never grew the process beyond its RSS at the start (freed memory
        # reused).
        return max(0, status_kib("VmHWM") - self.start_kib) * 1024


def compile_measured(traced, x, device, **options):
    with PhaseMemory() as memory:
        compiled = kiln.compile(traced, inputs=[x], device=device, progress=False, **options)
        peak = memory.peak_bytes()
    engines = sum(1 for s in compiled.kiln_report["segments"] if s["target"] == "engine")
    return compiled, peak, engines


def run(name, device, pieces):
    model, make_input = make_model(name)
    x = make_input(1)
    model = model.to(device)
    x = x.to(device)
    weights = sum(t.numel() * t.element_size()
                  for t in list(model.parameters()) + list(model.buffers()))
    with torch.no_grad():
        traced = torch.jit.trace(model, x, check_trace=False)
        expected = model(x)
    rows = []
    compiled, peak, engines = compile_measured(traced, x, device)
    base_ms = latency_ms(compiled, x, device)
    rows.append((f"{name}", "default", engines, peak, peak / weights, base_ms, 1.0,
                 max_diff(compiled(x), expected)))
    del compiled
    for k in pieces:
        budget = int(weights * MULTIPLIER / k * 1.05)
        compiled, peak, engines = compile_measured(
            traced, x, device, enable_resource_partitioning=True, cpu_memory_budget=budget)
        ms = latency_ms(compiled, x, device)
        rows.append((name, f"budget {budget / 2**20:.0f} MiB", engines, peak, peak / weights, ms,
                     ms / base_ms, max_diff(compiled(x), expected)))
        del compiled
    return weights, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="vgg16,resnet50")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--pieces", default="2,3,4")
    args = parser.parse_args()
    pieces = [int(p) for p in args.pieces.split(",") if p]
    print(f"device {args.device}, batch 1, torch {torch.__version__}; convert peak: peak RSS "
          f"above the RSS at the start of the convert phase")
    print("| model | weights MiB | compile | engines | convert peak MiB | peak / weights | "
          "run ms | vs default | max diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        weights, rows = run(name, args.device, pieces)
        for model, what, engines, peak, ratio, ms, rel, diff in rows:
            print(f"| {model} | {weights / 2**20:.0f} | {what} | {engines} | {peak / 2**20:.0f} | "
                  f"{ratio:.2f} | {ms:.2f} | {rel:.2f}x | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
