"""Times PyTorch's scaled_dot_product_attention (flash and cuDNN backends where available) on the
attention shapes of bench/gpu's ViT and BERT, fp16, by CUDA events after warm-up (median of 50),
as the reference for kiln's flash kernel (the attention rows of `kiln-run --profile`). Each timing
covers 20 calls back to back, so the host's dispatch of one call does not count."""
import statistics
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

def median_ms(fn, reps=50, calls=20):
    for _ in range(10):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)

for name, b, l in [("vit_b_16", 32, 197), ("vit_b_16", 1, 197), ("bert", 32, 128), ("bert", 1, 128)]:
    q, k, v = (torch.randn(b, 12, l, 64, device="cuda", dtype=torch.half) for _ in range(3))
    row = [f"{name} b{b} [{b},12,{l},64]"]
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        try:
            with sdpa_kernel(backend):
                row.append(f"{backend.name} {median_ms(lambda: F.scaled_dot_product_attention(q, k, v)) * 1e3:.1f} us")
        except RuntimeError as e:
            row.append(f"{backend.name} n/a")
    print(" | ".join(row))
