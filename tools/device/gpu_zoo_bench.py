"""Side by side on a CUDA device: each module that tests/gpu/zoo_gpu_test.cpp compiled and saved
(NAME.kiln.ts) against its original (NAME.ts) run eagerly by PyTorch, on the model's example input.
Prints one table row per model: max |kiln - torch| (fp32, TF32 off), and the median latency of one
call, synchronized, timed by CUDA events after warm-up: kiln with CUDA graphs, kiln without them
(KILN_CUDA_GRAPHS=0), eager PyTorch."""
import argparse
import faulthandler
import glob
import os
import statistics
import sys

import torch

# Whole models, fp32 against PyTorch's fp32 (TF32 off): |kiln - torch| <= REL * max|torch| + ABS,
# the bound of the CPU zoo; layers alone are held to 1e-5 (tests/engine_cuda).
REL, ABS = 1e-4, 1e-5


def latency_ms(fn, x, warmup, iters):
    with torch.no_grad():
        for _ in range(warmup):
            fn(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn(x)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def max_diff(a, b):
    if isinstance(a, (tuple, list)):
        return max(max_diff(x, y) for x, y in zip(a, b))
    return (a.double() - b.double()).abs().max().item(), b.double().abs().max().item()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runtime", required=True, help="libkiln_runtime.so")
    p.add_argument("--models", required=True, help="folder of NAME.ts and NAME.io.pt")
    p.add_argument("--compiled", required=True, help="folder of NAME.kiln.ts")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--only", help="just this model's row (no header)")
    p.add_argument("--header", action="store_true", help="just the header")
    args = p.parse_args()
    faulthandler.enable()
    torch.ops.load_library(args.runtime)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda:0")
    if args.only:
        return 0 if row(args.only, os.path.join(args.compiled, args.only + ".kiln.ts"), args,
                        dev) else 1
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(dev)}; median of {args.iters} "
          f"synchronized calls after {args.warmup} warm-up, ms; NVIDIA_TF32_OVERRIDE="
          f"{os.environ.get('NVIDIA_TF32_OVERRIDE', '(unset)')}")
    header = (f"{'model':<24} {'input':<16} {'max|diff|':>10} {'rel':>9} {'kiln+graphs':>11} "
              f"{'kiln':>8} {'torch':>8} {'speedup':>8}  stream")
    print(header)
    print("-" * len(header), flush=True)
    if args.header:
        return 0
    failed = False
    paths = sorted(glob.glob(os.path.join(args.compiled, "*.kiln.ts")))
    if not paths:
        print(f"no compiled modules in {args.compiled}")
        return 1
    for path in paths:
        name = os.path.basename(path)[:-len(".kiln.ts")]
        try:
            failed |= not row(name, path, args, dev)
        except Exception as e:  # one model's failure does not hide the others' rows
            print(f"{name:<24} error: {str(e).splitlines()[0][:150]}", flush=True)
            failed = True
    return 1 if failed else 0


def row(name, path, args, dev):
    """Prints one table row; returns whether kiln matched PyTorch."""
    inputs, _ = torch.load(os.path.join(args.models, name + ".io.pt"))
    x = inputs[0].to(dev)
    ref = torch.jit.load(os.path.join(args.models, name + ".ts"), map_location=dev).eval()
    os.environ.pop("KILN_CUDA_GRAPHS", None)
    kiln = torch.jit.load(path)
    os.environ["KILN_CUDA_GRAPHS"] = "0"
    kiln_eager = torch.jit.load(path)
    os.environ.pop("KILN_CUDA_GRAPHS", None)
    with torch.no_grad():
        expected = ref(x)
        outs = [kiln(x) for _ in range(3)]  # eager, capture, replay
        # On a stream of the caller's: the engine enqueues there.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            on_stream = kiln(x)
            on_stream_eager = kiln_eager(x)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
    diff, scale = max(max_diff(o, expected) for o in outs + [on_stream_eager])
    sdiff, _ = max_diff(on_stream, expected)
    rel = diff / scale if scale else diff
    ok = diff <= REL * scale + ABS and sdiff <= REL * scale + ABS
    t_graph = latency_ms(kiln, x, args.warmup, args.iters)
    t_kiln = latency_ms(kiln_eager, x, args.warmup, args.iters)
    t_torch = latency_ms(ref, x, args.warmup, args.iters)
    shape = "x".join(str(d) for d in x.shape)
    print(f"{name:<24} {shape:<16} {diff:>10.2e} {rel:>9.1e} {t_graph:>11.3f} {t_kiln:>8.3f} "
          f"{t_torch:>8.3f} {t_torch / min(t_graph, t_kiln):>7.2f}x  "
          f"{'ok' if sdiff <= REL * scale + ABS else 'DIFFERS'}{'' if ok else '  FAIL'}",
          flush=True)
    return ok


if __name__ == "__main__":
    sys.exit(main())
