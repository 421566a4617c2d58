#!/usr/bin/env python3
"""Writes make demo's model: torchvision's resnet18 with random weights (fixed seed), traced at
batch 1 and 224x224 and saved as TorchScript."""
import sys

import torch
import torchvision


def main():
    if len(sys.argv) != 2:
        print("usage: write_resnet18.py OUT.ts", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()  # 1000 classes, no pretrained weights
    traced = torch.jit.trace(model, (torch.randn(1, 3, 224, 224),), check_trace=False)
    traced.save(sys.argv[1])
    print(f"wrote {sys.argv[1]} (torchvision resnet18, random weights, torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
