#!/usr/bin/env python3
"""torch.compile(model, backend="kiln") over the CPU zoo and transformers' BertModel and GPT2Model
(random weights): per model, the largest difference from eager and how many graphs Dynamo handed
kiln and how many stayed in PyTorch. Needs the kiln package (after `make`, .venv's python has it).

    .venv/bin/python bench/cpu_models/dynamo_zoo.py [--size 96]
"""
import argparse
import time

import torch
import torchvision
import transformers

import kiln

VISION = ["resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "convnext_tiny",
          "densenet121", "swin_t", "regnet_y_400mf", "shufflenet_v2_x1_0", "squeezenet1_1"]


def run(name, model, x):
    torch._dynamo.reset()
    before = dict(kiln.dynamo.stats)
    start = time.time()
    with torch.no_grad():
        out = torch.compile(model, backend="kiln")(x)
        ref = model(x)
    if hasattr(out, "last_hidden_state"):
        out, ref = out.last_hidden_state, ref.last_hidden_state
    counts = {k: kiln.dynamo.stats[k] - before[k] for k in before}
    diff = (out - ref).abs().max().item()
    print(f"| {name} | {diff:.2e} | {counts['compiled']} | {counts['in_pytorch']} | "
          f"{time.time() - start:.1f} |", flush=True)
    return diff < 1e-3 and counts["in_pytorch"] == 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=96, help="image size (ViT and Swin take 224)")
    args = p.parse_args()
    print("| model | max diff | graphs in kiln | graphs in PyTorch | compile+run s |")
    print("|---|---|---|---|---|")
    ok = True
    for name in VISION:
        torch.manual_seed(0)
        size = 224 if name in ("vit_b_16", "swin_t") else args.size
        ok &= run(name, getattr(torchvision.models, name)().eval(),
                  torch.randn(1, 3, size, size))
    for cls, config in [(transformers.BertModel, transformers.BertConfig()),
                        (transformers.GPT2Model, transformers.GPT2Config())]:
        torch.manual_seed(0)
        ok &= run(cls.__name__, cls(config).eval(), torch.randint(0, 1000, (1, 64)))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
