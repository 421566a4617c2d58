"""PyTorch's time for the regnets' grouped 3x3 convolutions (the shapes of grouped_conv_probe.cu),
f16, NHWC (channels_last) and NCHW, with cudnn.benchmark off (PyTorch's default, what
torch.compile's convolutions run with) and on. Medians of CUDA-event timed calls, us per call."""

import statistics
import sys

import torch
import torch.nn.functional as F

CASES = [
    (32, 96, 112, 2, 2), (32, 96, 56, 1, 2), (32, 192, 56, 2, 4), (32, 192, 28, 1, 4),
    (32, 432, 28, 2, 9), (32, 432, 14, 1, 9), (32, 1008, 14, 2, 21), (32, 1008, 7, 1, 21),
    (32, 48, 112, 2, 2), (32, 120, 28, 1, 5), (32, 336, 14, 1, 14), (32, 888, 7, 1, 37),
]


def time_us(fn):
    for _ in range(5):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(21):
        a.record()
        for _ in range(10):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 100.0)
    return statistics.median(times)


def main():
    print(f"torch {torch.__version__} cuDNN {torch.backends.cudnn.version()}")
    print("| N C H stride groups | NHWC | NCHW | NHWC benchmark | NCHW benchmark |")
    print("|---|---|---|---|---|")
    with torch.no_grad():
        for n, c, h, s, g in CASES:
            row = []
            for bench in (False, True):
                torch.backends.cudnn.benchmark = bench
                for cl in (True, False):
                    x = torch.randn(n, c, h, h, device="cuda", dtype=torch.half)
                    w = torch.randn(c, c // g, 3, 3, device="cuda", dtype=torch.half)
                    if cl:
                        x = x.to(memory_format=torch.channels_last)
                        w = w.to(memory_format=torch.channels_last)
                    row.append(time_us(lambda: F.conv2d(x, w, None, s, 1, 1, g)))
            print(f"| {n} {c} {h} {s} {g} | " + " | ".join(f"{t:.1f}" for t in row) + " |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
