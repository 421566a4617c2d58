#!/usr/bin/env python3
"""Writes kiln's small test models (random weights, fixed seed) as TorchScript files.

For each model NAME it writes NAME.ts (the module) and NAME.io.pt (torch.save of
(inputs_tuple, expected_output)), so C++ tests can run the module and compare values.
Models are skipped when a manifest from the same script and torch version is present.
"""
import argparse
import hashlib
import json
import os
import sys
from typing import List, Tuple

import torch
import torch.nn as nn
import torchvision


class Lgamma(nn.Module):
    """The graph of seed 000: lgamma is an op our engine will not convert."""

    def forward(self, x, y):
        add = x + y
        x_lgamma = torch.lgamma(x)
        mul = x * y
        y_lgamma = torch.lgamma(y)
        div = x / y
        div_lgamma = torch.lgamma(div)
        return torch.cat([x_lgamma, y_lgamma, div_lgamma, add, mul], 0)


class ControlFlow(nn.Module):
    """Data-dependent branch and a loop whose trip count comes from the input."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        if bool(y.mean() > 0.1):
            y = y * 2.0
        else:
            y = y - 1.0
        z = y.mean(dim=[2, 3])
        acc = torch.zeros_like(z[0])
        for i in range(x.size(0)):
            acc = acc + z[i]
        return self.fc(z + acc)


class TupleList(nn.Module):
    """Tuple and list inputs and outputs."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, pair: Tuple[torch.Tensor, torch.Tensor],
                items: List[torch.Tensor]) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        a, b = pair
        s = self.fc(a) + b
        outs: List[torch.Tensor] = []
        for t in items:
            outs.append(torch.sigmoid(t) * s.sum())
        return s, outs


class TextEncoder(nn.Module):
    """BERT-style: token + position embeddings, nn.TransformerEncoder, a pooled head."""

    def __init__(self, vocab=100, d=64, heads=4, layers=2, seq=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=2 * d, dropout=0.1,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, 2)

    def forward(self, ids):
        h = self.encoder(self.tok(ids) + self.pos)
        return self.head(h[:, 0])


class FastPathTransformer(nn.Module):
    """Transformer layers that run torch's fused inference fast path when traced without autograd
    (aten::_transformer_encoder_layer_fwd, aten::_native_multi_head_attention): a BERT-style
    post-norm gelu encoder, a pre-norm relu layer, and self-attention."""

    def __init__(self, d=64, heads=4, layers=2):
        super().__init__()
        post = nn.TransformerEncoderLayer(d, heads, dim_feedforward=2 * d, dropout=0.1,
                                          activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(post, layers, enable_nested_tensor=False)
        self.pre = nn.TransformerEncoderLayer(d, heads, dim_feedforward=2 * d, dropout=0.1,
                                              batch_first=True, norm_first=True)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x):
        h = self.pre(self.encoder(x))
        return self.attn(h, h, h, need_weights=False)[0]


def zoo():
    """torchvision classification architectures, shrunk where the constructor allows so the
    suite stays fast: each compiles into one engine (tests/compiler/zoo_test.cpp)."""
    from torchvision.models import convnext, densenet
    img = torch.randn(1, 3, 64, 64)
    small = torch.randn(1, 3, 32, 32)
    yield "zoo_resnet50", torchvision.models.resnet50(num_classes=10), (img,), "trace"
    yield "zoo_mobilenet_v3_small", torchvision.models.mobilenet_v3_small(num_classes=10), (
        img,), "trace"
    yield "zoo_efficientnet_b0", torchvision.models.efficientnet_b0(num_classes=10), (
        img,), "trace"
    yield "zoo_regnet_y_400mf", torchvision.models.regnet_y_400mf(num_classes=10), (
        img,), "trace"
    yield "zoo_convnext", convnext.ConvNeXt(
        [convnext.CNBlockConfig(32, 64, 1), convnext.CNBlockConfig(64, None, 1)],
        num_classes=10), (small,), "trace"
    yield "zoo_densenet", densenet.DenseNet(growth_rate=8, block_config=(2, 2, 2, 2),
                                            num_init_features=16, num_classes=10), (img,), "trace"
    yield "zoo_squeezenet1_1", torchvision.models.squeezenet1_1(num_classes=10), (img,), "trace"
    yield "zoo_shufflenet_v2", torchvision.models.shufflenet_v2_x0_5(num_classes=10), (
        img,), "trace"
    yield "zoo_mnasnet", torchvision.models.mnasnet0_5(num_classes=10), (img,), "trace"
    # Two stages of 8x8 and 4x4 tokens in 4x4 windows: the first stage's second block shifts its
    # windows, with the attention mask built by filling slices of zeros.
    yield "zoo_swin", torchvision.models.SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[4, 4],
        num_classes=10), (small,), "trace"
    yield "zoo_googlenet", torchvision.models.googlenet(num_classes=10, aux_logits=False,
                                                        init_weights=True), (img,), "trace"



def models():
    """(name, module, example inputs, how: 'trace', 'trace-inference' or 'script')."""
    img = torch.randn(1, 3, 64, 64)
    yield "resnet18", torchvision.models.resnet18(num_classes=10), (img,), "trace"
    yield "mobilenet_v2", torchvision.models.mobilenet_v2(num_classes=10), (img,), "trace"
    vit = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                               num_heads=4, hidden_dim=64, mlp_dim=128,
                                               num_classes=10)
    yield "vit_tiny", vit, (torch.randn(1, 3, 32, 32),), "trace"
    yield "text_encoder", TextEncoder(), (torch.randint(0, 100, (2, 16)),), "trace"
    yield from zoo()
    yield "lgamma", Lgamma(), (torch.rand(2, 3) + 0.5, torch.rand(2, 3) + 0.5), "script"
    yield "control_flow", ControlFlow(), (torch.randn(2, 3, 16, 16),), "script"
    yield "tuple_list", TupleList(), (
        (torch.randn(2, 8), torch.randn(2, 8)), [torch.randn(3), torch.randn(4)]), "script"
    yield "transformer_fast_path", FastPathTransformer(), (torch.randn(2, 16, 64),), \
        "trace-inference"
    vit = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                               num_heads=4, hidden_dim=64, mlp_dim=128,
                                               num_classes=10)
    yield "vit_tiny_fast_path", vit, (torch.randn(1, 3, 32, 32),), "trace-inference"


# Models also written as torch.export programs (NAME.pt2: export's default ATen graph; NAME.core.pt2:
# after run_decompositions, core ATen) for the ATen frontend's tests, with a dynamic batch (1..4)
# where export allows one.
EXPORTED = ["resnet18", "mobilenet_v2", "vit_tiny", "text_encoder", "zoo_resnet50",
            "zoo_mobilenet_v3_small", "zoo_efficientnet_b0", "zoo_regnet_y_400mf", "zoo_convnext",
            "zoo_densenet", "zoo_squeezenet1_1", "zoo_shufflenet_v2", "zoo_mnasnet", "zoo_swin",
            "zoo_googlenet"]


def export_programs(out, name, module, inputs):
    """Writes NAME.pt2 and NAME.core.pt2; the batch is dynamic unless export refuses it."""
    batch = torch.export.Dim("batch", min=1, max=4)
    # An example batch of 2: export specializes dims whose example size is 1.
    example = tuple(torch.cat([x, x]) if x.shape[0] == 1 else x for x in inputs)
    try:
        program = torch.export.export(module, example,
                                      dynamic_shapes=tuple({0: batch} for _ in inputs))
    except Exception:  # noqa: BLE001 (a model whose shape arithmetic fixes its batch)
        program = torch.export.export(module, inputs)
    torch.export.save(program, os.path.join(out, name + ".pt2"))
    torch.export.save(program.run_decompositions(), os.path.join(out, name + ".core.pt2"))


class BufferCounter(nn.Module):
    """Mutates a buffer in forward: the program keeps a buffer mutation, which kiln refuses."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1)
        return x * 2


class TransposeByStrides(nn.Module):
    """as_strided that reads its input out of order (a transpose by strides): kiln refuses it."""

    def forward(self, x):
        return torch.as_strided(x, (3, 2), (1, 3)) * 2


class GradModeBlock(nn.Module):
    """A `torch.no_grad()` block in forward: exported as a wrap_with_set_grad_enabled subgraph."""

    def forward(self, x):
        with torch.no_grad():
            y = x * 2 + 1
        return y.relu()


class AutocastBlock(nn.Module):
    """An enabled autocast region: its ops would compute in bf16; kiln refuses it."""

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return x @ x.t()


def rewrite_archive(src, dst, edit):
    """A copy of the .pt2 archive `src` with `edit(record_name, bytes) -> bytes or None` applied
    (None drops the record): the bad archives of the frontend's error tests."""
    import zipfile
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = edit(info.filename, zin.read(info.filename))
            if data is not None:
                zout.writestr(info.filename, data)


def bad_archives(out):
    """Archives the ATen frontend must refuse, each with a message naming the problem."""
    good = os.path.join(out, "resnet18.pt2")
    with open(good, "rb") as f:
        data = f.read()
    with open(os.path.join(out, "bad_truncated.pt2"), "wb") as f:
        f.write(data[:len(data) // 2])

    def model_json(edit_program):
        def edit(record, payload):
            if record.endswith("models/model.json"):
                program = json.loads(payload)
                edit_program(program)
                return json.dumps(program).encode()
            return payload
        return edit

    def schema_99(program):
        program["schema_version"]["major"] = 99

    def unknown_op(program):
        program["graph_module"]["graph"]["nodes"][0]["target"] = "torch.ops.aten.kiln_no_such_op.default"

    rewrite_archive(good, os.path.join(out, "bad_schema.pt2"), model_json(schema_99))
    rewrite_archive(good, os.path.join(out, "bad_op.pt2"), model_json(unknown_op))
    rewrite_archive(good, os.path.join(out, "bad_format.pt2"),
                    lambda r, p: b"pt3" if r.endswith("/archive_format") else p)
    rewrite_archive(good, os.path.join(out, "bad_weights.pt2"),
                    lambda r, p: p[:8] if r.endswith("/data/weights/weight_0") else p)
    torch.export.save(torch.export.export(BufferCounter(), (torch.randn(2, 3),)),
                      os.path.join(out, "bad_mutation.pt2"))
    torch.export.save(torch.export.export(TransposeByStrides(), (torch.randn(2, 3),)),
                      os.path.join(out, "bad_as_strided.pt2"))
    with torch.enable_grad():  # where grad mode is off, no_grad() leaves no wrapper
        wrapped = os.path.join(out, "grad_block.pt2")
        torch.export.save(torch.export.export(GradModeBlock(), (torch.randn(2, 3),)), wrapped)
        torch.export.save(torch.export.export(AutocastBlock(), (torch.randn(2, 3),)),
                          os.path.join(out, "bad_autocast.pt2"))

    def drop_operand(program):  # the wrapper's subgraph takes one input more than it is given
        for node in program["graph_module"]["graph"]["nodes"]:
            if node["target"].endswith("wrap_with_set_grad_enabled"):
                node["inputs"].pop()

    rewrite_archive(wrapped, os.path.join(out, "bad_wrapper.pt2"), model_json(drop_operand))


def calibrate(module, inputs):
    """Random weights as constructed give degenerate outputs: torchvision zero-initializes some
    classifier heads (all-zero logits), and batch norms with their initial statistics let
    activations vanish through deep stacks (logits ~1e-9). A zero weight matrix gets random
    values, and batch-norm statistics are measured on a few random batches, so the outputs the
    tests compare against are of order one."""
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() >= 2 and not p.any():
                p.normal_(0.0, p.shape[1] ** -0.5)
    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms or not all(isinstance(x, torch.Tensor) and x.is_floating_point() for x in inputs):
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches below
    module.train()
    with torch.no_grad():
        for _ in range(4):
            module(*[torch.randn(8, *x.shape[1:]) for x in inputs])


def fingerprint():
    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read() + torch.__version__.encode()).hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="folder to write the models into")
    parser.add_argument("--force", action="store_true", help="rewrite even if up to date")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    manifest_path = os.path.join(args.out, "manifest.json")
    fp = fingerprint()
    if not args.force and os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
        if manifest.get("fingerprint") == fp and all(
                os.path.exists(os.path.join(args.out, m + ".ts")) for m in manifest["models"]):
            print(f"test models up to date in {args.out}")
            return 0

    torch.manual_seed(0)
    names = []
    for name, module, inputs, how in models():
        calibrate(module, inputs)
        module.eval()
        # Tracing with autograd on keeps nn.MultiheadAttention off its fused inference path,
        # so the graph holds ordinary aten ops on every torch version; 'trace-inference' traces
        # without autograd, as users of inference do, and records the fused ops.
        if how == "trace":
            scripted = torch.jit.trace(module, inputs, check_trace=False)
        elif how == "trace-inference":
            with torch.no_grad():
                scripted = torch.jit.trace(module, inputs, check_trace=False)
        else:
            scripted = torch.jit.script(module)
        with torch.no_grad():
            expected = module(*inputs)
        scripted.save(os.path.join(args.out, name + ".ts"))
        torch.save((inputs, expected), os.path.join(args.out, name + ".io.pt"))
        names.append(name)
        print(f"wrote {name}.ts ({how})")
        if name in EXPORTED:
            export_programs(args.out, name, module, inputs)
            print(f"wrote {name}.pt2 and {name}.core.pt2")
    bad_archives(args.out)
    with open(manifest_path, "w") as f:
        json.dump({"fingerprint": fp, "torch": torch.__version__, "models": names}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
