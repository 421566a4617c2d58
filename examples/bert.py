"""A transformers BertModel (random weights from its config) compiled by kiln, through
kiln.compile and through torch.compile(backend="kiln"), timed against eager PyTorch.

    .venv/bin/python examples/bert.py [--layers 12] [--hidden 768] [--seq 128] [--batch 1]
"""
import argparse
import time

import torch
import transformers

import kiln


class LastHiddenState(torch.nn.Module):
    """BertModel's output as a plain tensor (what tracing wants)."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids):
        return self.bert(input_ids).last_hidden_state


def median_ms(fn, x, runs):
    with torch.no_grad():
        for _ in range(3):
            fn(x)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            fn(x)
            times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()
    config = transformers.BertConfig(hidden_size=args.hidden, num_hidden_layers=args.layers,
                                     num_attention_heads=max(1, args.hidden // 64),
                                     intermediate_size=4 * args.hidden)
    model = LastHiddenState(transformers.BertModel(config).eval()).eval()
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq))
    compiled = kiln.compile(model, inputs=[ids])
    print(compiled.kiln_summary)
    dynamo = torch.compile(model, backend="kiln")
    with torch.no_grad():
        reference = model(ids)
        diff = (compiled(ids) - reference).abs().max().item()
        diff_dynamo = (dynamo(ids) - reference).abs().max().item()
    eager, ours = median_ms(model, ids, args.runs), median_ms(compiled, ids, args.runs)
    print(f"max |kiln - eager| {diff:.2e} (torch.compile backend: {diff_dynamo:.2e}); "
          f"median ms: eager {eager:.2f}, kiln {ours:.2f} ({eager / ours:.2f}x)")
    return 0 if max(diff, diff_dynamo) < 1e-3 else 1


if __name__ == "__main__":
    raise SystemExit(main())
