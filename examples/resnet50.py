"""torchvision's resnet50 (random weights) compiled by kiln and timed against eager PyTorch.

    .venv/bin/python examples/resnet50.py [--batch 1] [--size 224] [--device cpu|cuda]
"""
import argparse
import time

import torch
import torchvision

import kiln


def median_ms(fn, x, runs):
    with torch.no_grad():
        for _ in range(3):
            fn(x)
        times = []
        for _ in range(runs):
            if x.is_cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn(x)
            if x.is_cuda:
                torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--device", default="cpu")
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()
    model = torchvision.models.resnet50().eval().to(args.device)
    x = torch.randn(args.batch, 3, args.size, args.size, device=args.device)
    compiled = kiln.compile(model, inputs=[x])
    print(compiled.kiln_summary)
    with torch.no_grad():
        diff = (compiled(x) - model(x)).abs().max().item()
    eager, ours = median_ms(model, x, args.runs), median_ms(compiled, x, args.runs)
    print(f"max |kiln - eager| {diff:.2e}; median ms: eager {eager:.2f}, kiln {ours:.2f} "
          f"({eager / ours:.2f}x)")
    return 0 if diff < 1e-2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
