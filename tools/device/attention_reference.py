"""Device time of PyTorch's scaled_dot_product_attention per backend (flash, cuDNN's fused
attention, memory-efficient) on the attention shapes of bench/gpu's models, fp16 (and the dtypes
named: `attention_reference.py fp16 fp32 bf16`): the reference
for kiln's flash kernel (compare `tools/device/kernel-times.sh`'s attention rows) and the
measurement issue #29 asks for before kiln runs cuDNN's fused attention anywhere.

Each backend's call is captured 20 times into one CUDA graph and the graph replayed (CUDA events,
median of 30 replays after warm-up), so neither Python nor the dispatcher counts: what is left is
the kernels and the gaps between them in a replay, as in kiln's own graphs. A backend that cannot
take a shape (a mask, a head size, grouped heads) prints n/a with the reason's first line."""
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

CALLS, REPS = 20, 30
BACKENDS = (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
            SDPBackend.EFFICIENT_ATTENTION)


def graph_us(fn):
    """Median us of one fn() inside a replayed CUDA graph of CALLS calls."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm-up outside the capture (workspaces, lazy modules)
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(REPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / CALLS)
    return statistics.median(times)


def padding_mask(b, s):
    """A padded batch's key mask [B, 1, 1, S] (True: kept): sequence 0 full, the others 3/4."""
    lengths = torch.full((b,), s * 3 // 4, device="cuda")
    lengths[0] = s
    return (torch.arange(s, device="cuda")[None, :] < lengths[:, None])[:, None, None, :]


# name, batch, query heads, key/value heads, L, S, E, mask ("padding", "causal" or None)
SHAPES = [
    ("bert b1", 1, 12, 12, 128, 128, 64, "padding"),
    ("bert b32", 32, 12, 12, 128, 128, 64, "padding"),
    ("bert b1 seq512", 1, 12, 12, 512, 512, 64, "padding"),
    ("bert b32 seq512", 32, 12, 12, 512, 512, 64, "padding"),
    ("vit_b_16 b1", 1, 12, 12, 197, 197, 64, None),
    ("vit_b_16 b32", 32, 12, 12, 197, 197, 64, None),
    ("gpt2 b1", 1, 12, 12, 128, 128, 64, "causal"),
    ("gpt2 b32", 32, 12, 12, 128, 128, 64, "causal"),
    ("llama-like b1 (GQA 8/2, E=128)", 1, 8, 2, 128, 128, 128, "causal"),
    ("swin_t b32 windows", 32 * 64, 3, 3, 49, 49, 32, None),
]


DTYPES = {"fp16": torch.half, "bf16": torch.bfloat16, "fp32": torch.float32}


def main(dtypes):
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"us per call in a replayed CUDA graph of {CALLS} calls (fp32: TF32 allowed)")
    torch.backends.cuda.matmul.allow_tf32 = True
    print("| shape | dtype | q [B, H, L, E] | mask | " + " | ".join(b.name for b in BACKENDS)
          + " |")
    print("|---|---|---|---|" + "---|" * len(BACKENDS))
    torch.manual_seed(0)
    for (name, b, hq, hkv, l, s, e, mask), dtype in (
            (shape, d) for shape in SHAPES for d in dtypes):
        q = torch.randn(b, hq, l, e, device="cuda", dtype=DTYPES[dtype])
        k, v = (torch.randn(b, hkv, s, e, device="cuda", dtype=DTYPES[dtype]) for _ in range(2))
        kwargs = {"enable_gqa": True} if hkv != hq else {}
        if mask == "padding":
            kwargs["attn_mask"] = padding_mask(b, s)
        elif mask == "causal":
            kwargs["is_causal"] = True
        row = [name, dtype, f"[{b}, {hq}, {l}, {e}]" + (f" kv heads {hkv}" if hkv != hq else ""),
               mask or "none"]
        for backend in BACKENDS:
            try:
                with sdpa_kernel(backend):
                    us = graph_us(lambda: F.scaled_dot_product_attention(q, k, v, **kwargs))
                row.append(f"{us:.1f}")
            except Exception as err:  # the backend does not take this shape
                torch.cuda.synchronize()
                row.append("n/a (" + str(err).strip().splitlines()[0][:60] + ")")
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    names = sys.argv[1:] or ["fp16"]
    unknown = [n for n in names if n not in DTYPES]
    if unknown:
        sys.exit(f"attention_reference.py: unknown dtype {unknown[0]} (known: {', '.join(DTYPES)})")
    main(names)
