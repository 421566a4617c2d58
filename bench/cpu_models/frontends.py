#!/usr/bin/env python3
"""The two frontends side by side on the CPU (issue #32): each model of the CPU zoo and
transformers' BertModel and GPT2Model (random weights, small configs) compiled by `kiln.compile`
from a trace (the TorchScript frontend) and from `torch.export.export` (the ATen frontend), with
default flags. Per model and frontend: engines, ops in engines and in PyTorch, layers and
shuffles of the built engines, the time of torch.export.export (the user's, before kiln), of
kiln.compile (the trace included for the TorchScript frontend) and of its shape analysis phase,
the largest difference from eager, and the median run time (5 runs). Prints a markdown table.

    .venv/bin/python bench/cpu_models/frontends.py [--size 96] [--models resnet50,bert]
"""
import argparse
import statistics
import time

import torch
import torchvision
import transformers

import kiln

VISION = ["resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "convnext_tiny",
          "densenet121", "swin_t", "regnet_y_400mf", "shufflenet_v2_x1_0", "squeezenet1_1"]
TEXT = ["bert", "gpt2"]


class LastHidden(torch.nn.Module):
    """A transformers model's last hidden state (a tensor output for both frontends)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, mask):
        return self.model(input_ids=ids, attention_mask=mask).last_hidden_state


def make(name, size):
    torch.manual_seed(0)
    if name in TEXT:
        config = (transformers.BertConfig if name == "bert" else transformers.GPT2Config)(
            num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
            n_layer=2, n_embd=128, n_head=4)
        config._attn_implementation = "sdpa"
        cls = transformers.BertModel if name == "bert" else transformers.GPT2Model
        model = LastHidden(cls(config)).eval()
        ids = torch.randint(0, 1000, (2, 32))
        mask = torch.ones(2, 32, dtype=torch.long)
        mask[1, 20:] = 0
        return model, (ids, mask)
    side = 224 if name in ("vit_b_16", "swin_t") else size
    model = getattr(torchvision.models, name)().eval()
    for m in model.modules():  # ViT's classifier starts at zero: its output would say nothing
        if isinstance(m, torch.nn.Linear) and not m.weight.any():
            torch.nn.init.normal_(m.weight, std=0.02)
    return model, (torch.randn(2, 3, side, side),)


def median_ms(fn, args, runs=5):
    with torch.no_grad():
        fn(*args)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            fn(*args)
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def row(name, frontend, model, args, ref):
    start = time.perf_counter()
    if frontend == "trace":
        compiled = kiln.compile(model, inputs=list(args))  # traces, then compiles
        exporting = 0.0
    else:
        program = torch.export.export(model, args)
        exporting = time.perf_counter() - start
        start = time.perf_counter()
        compiled = kiln.compile(program)
    seconds = time.perf_counter() - start
    report = compiled.kiln_report
    engines = [s for s in report["segments"] if "engine" in s]
    phases = {p["phase"]: p["ms"] for p in report["phases"]}
    with torch.no_grad():
        out = compiled(*args)
    diff = (out - ref).abs().max().item()
    print(f"| {name} | {frontend} | {len(engines)} | {report['engine_ops']} | "
          f"{report['torch_ops']} | {sum(s['layers'] for s in engines)} | "
          f"{sum(s['shuffles'] for s in engines)} | {exporting:.2f} | {seconds:.2f} | "
          f"{phases.get('shape analysis', 0) / 1e3:.2f} | {diff:.1e} | "
          f"{median_ms(compiled, args):.1f} |", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=96, help="image size (ViT and Swin take 224)")
    p.add_argument("--models", default=",".join(VISION + TEXT))
    args = p.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads, images {args.size}px (ViT, Swin 224), batch 2")
    print()
    print("| model | frontend | engines | engine ops | torch ops | layers | shuffles | export s "
          "| kiln.compile s | shape analysis s | max diff | run ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        model, inputs = make(name, args.size)
        with torch.no_grad():
            ref = model(*inputs)
        for frontend in ("trace", "export"):
            try:
                row(name, frontend, model, inputs, ref)
            except Exception as e:  # noqa: BLE001 (a failing row is a row of the table)
                print(f"| {name} | {frontend} | error: {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:120]} ||||||||||", flush=True)


if __name__ == "__main__":
    main()
