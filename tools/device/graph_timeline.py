#!/usr/bin/env python3
"""Where a replayed inference's time goes between kernels: one bench model compiled by kilnc as
bench.py --via kilnc compiles it (traced on the CPU in fp32, default flags plus any given), called
until its CUDA graph replays, then a few calls under torch.profiler (CUPTI: every kernel of a
graph replay with its start and end on the GPU). Prints the last call's kernels in launch order
with each one's duration and the gap before it (GPU idle between the previous kernel's end and
its start: launch latency inside the graph, dependencies, a kernel's own ramp), then per kernel
name the launches, summed duration and summed gaps, and the call's span against the sum of its
kernels. Nsight Compute (kernel-times.sh) runs kernels one at a time and cannot show the gaps.

Usage (device, after a build with kilnc and the runtime library, e.g. gpu-iterate.sh):
  python3 tools/device/graph_timeline.py hf_bert 1 [--precision fp16] [-- kilnc flags...]
e.g. `... hf_bert 1 -- --switch attention_cudnn=on` against the default.
--peer MODE profiles torch.compile instead (MODE as bench.py's backends: reduce-overhead,
max-autotune-tf32, ...; the model cast to the precision on the GPU, as bench.py runs it), so the
two timelines of one row can be set side by side.
"""
import argparse
import collections
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from models import input_spec, make_model  # noqa: E402 (bench/models.py)
from kernel_times import short  # noqa: E402 (beside this file)

PRECISIONS = {"fp16": ("f16", torch.float16), "bf16": ("bf16", torch.bfloat16),
              "fp32": (None, torch.float32)}


def compile_plan(args, model, x, tmp):
    path, out = os.path.join(tmp, "model.ts"), os.path.join(tmp, "model.kiln.ts")
    with torch.no_grad():
        torch.jit.trace(model, x, check_trace=False).save(path)
    cmd = [args.kilnc, path, out, *input_spec(x).split(), "--device", "cuda", "-q"]
    low = PRECISIONS[args.precision][0]
    if low:
        cmd += ["-p", low, "-p", "f32"]
    cmd += args.kilnc_flags
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"kilnc failed ({' '.join(cmd)}):\n{(r.stderr or r.stdout)[-2000:]}")
    return torch.jit.load(out)


def kernels_of_last_call(prof):
    """The GPU work (kernels, memsets, copies) between the last two separators
    (torch.cuda._sleep's spin kernel, launched before every profiled call), sorted by start:
    (name, start us, end us)."""
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = sorted(((e.name, e.time_range.start, e.time_range.end) for e in events),
                     key=lambda k: k[1])
    marks = [i for i, k in enumerate(kernels) if "spin" in k[0].lower()]
    if len(marks) < 2:
        sys.exit("graph_timeline: the profile has fewer than two separator kernels; "
                 f"kernels seen: {sorted({short(k[0]) for k in kernels})[:20]}")
    return kernels[marks[-2] + 1:marks[-1]]  # memsets and copies too: graph nodes as well


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a bench/models.py name")
    p.add_argument("batch", type=int)
    p.add_argument("--precision", choices=list(PRECISIONS), default="fp16")
    p.add_argument("--kilnc", default="build-gpu/bin/kilnc")
    p.add_argument("--runtime", default="build-gpu/lib/libkiln_runtime.so")
    p.add_argument("--calls", type=int, default=3, help="profiled calls (the last is printed)")
    p.add_argument("--top", type=int, default=200, help="kernels printed in launch order")
    p.add_argument("--no-mask", action="store_true",
                   help="text transformers called with token ids only (default: ids and the "
                        "attention mask of a padded batch, as bench.py calls them)")
    p.add_argument("--peer", metavar="MODE",
                   help="profile torch.compile(mode=MODE) instead of kiln; a -tf32 suffix runs "
                        "fp32 matmuls on TF32, as bench.py's -tf32 backends")
    # More kilnc flags come after `--` (argparse would not give a trailing positional list the
    # words after the options).
    argv = sys.argv[1:]
    kilnc_flags = argv[argv.index("--") + 1:] if "--" in argv else []
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.kilnc_flags = kilnc_flags
    modes = ("default", "reduce-overhead", "max-autotune")
    if args.peer and args.peer.removesuffix("-tf32") not in modes:
        p.error(f"--peer {args.peer}: not a torch.compile mode ({', '.join(modes)}, each with an "
                "optional -tf32 suffix)")
    if args.peer and args.kilnc_flags:
        p.error("kilnc flags are for kiln's timeline, not --peer's")
    if not args.peer:
        torch.ops.load_library(args.runtime)
    torch.manual_seed(0)
    model, make_input = make_model(args.model, mask=not args.no_mask)
    model.eval()
    x = make_input(args.batch)
    x = tuple(x) if isinstance(x, (tuple, list)) else (x,)
    with tempfile.TemporaryDirectory(prefix="kiln_timeline_") as tmp:
        if args.peer:
            dtype = PRECISIONS[args.precision][1]
            torch.backends.cuda.matmul.allow_tf32 = args.peer.endswith("-tf32")
            gpu_model = model.cuda().to(dtype)
            inp = tuple(t.cuda().to(dtype) if t.is_floating_point() else t.cuda() for t in x)
            fn = torch.compile(gpu_model, mode=args.peer.removesuffix("-tf32"))
        else:
            fn = compile_plan(args, model, x, tmp)
            inp = tuple(t.cuda() for t in x)  # the traced module takes f32; the engine casts
        with torch.no_grad():
            for _ in range(20):  # chosen, captured, replayed
                fn(*inp)
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(args.calls):
                    torch.cuda._sleep(20000)
                    fn(*inp)
                torch.cuda._sleep(20000)
                torch.cuda.synchronize()
    kernels = kernels_of_last_call(prof)
    if not kernels:
        sys.exit("graph_timeline: no kernels between the separators")
    first, last = kernels[0][1], max(k[2] for k in kernels)
    rows, by_name, prev_end = [], collections.OrderedDict(), None
    for name, start, end in kernels:
        gap = 0.0 if prev_end is None else max(0.0, start - prev_end)
        prev_end = end if prev_end is None else max(prev_end, end)
        rows.append((short(name), start - first, end - start, gap))
        s = by_name.setdefault(short(name), [0, 0.0, 0.0])
        s[0] += 1
        s[1] += end - start
        s[2] += gap
    busy = sum(r[2] for r in rows)
    gaps = sum(r[3] for r in rows)
    print(f"# {torch.cuda.get_device_name()}: {args.model} b{args.batch} {args.precision} "
          f"{'torch.compile ' + args.peer if args.peer else 'kiln ' + ' '.join(args.kilnc_flags)}")
    print(f"{len(rows)} kernels, span {last - first:.1f} us: kernels {busy:.1f} us, gaps "
          f"{gaps:.1f} us ({gaps / max(len(rows) - 1, 1):.2f} us a boundary)\n")
    print("| # | kernel | start us | us | gap before us |\n|---|---|---|---|---|")
    for i, (name, start, dur, gap) in enumerate(rows[:args.top]):
        print(f"| {i} | {name} | {start:.1f} | {dur:.2f} | {gap:.2f} |")
    print("\n| kernel | launches | us | gaps before us |\n|---|---|---|---|")
    for name, (n, dur, gap) in sorted(by_name.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        print(f"| {name} | {n} | {dur:.1f} | {gap:.1f} |")


if __name__ == "__main__":
    main()
