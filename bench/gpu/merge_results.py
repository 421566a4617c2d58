#!/usr/bin/env python3
"""Merges bench.py runs into one markdown report (the results_*.md files of bench/gpu).

    merge_results.py A=run1/bench_gpu.json B=run2/bench_gpu.json ...

Each argument is LABEL=PATH of a bench_gpu.json. A row (model, batch, precision, backend) is taken
from the last run that has it, so later runs supersede earlier ones; the run column says which.
Speed-ups compare kiln with a torch.compile mode only within one run (pairs from the same process
run), and say so when a run has no such pair. Needs only the standard library.
"""
import json
import math
import sys

MODELS = ["resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "bert"]
PEERS = ["reduce-overhead", "max-autotune", "reduce-overhead-tf32", "max-autotune-tf32"]
BACKENDS = ["eager", "torchscript", "reduce-overhead", "max-autotune", "reduce-overhead-tf32",
            "max-autotune-tf32", "kiln", "kiln-notf32",
            "kiln-exactgelu", "kiln-interp", "kiln-cudnn-grouped"]
PRECISIONS = ("fp16", "bf16", "fp32")  # the order of a report's sections and summary rows
COLUMNS = ("| model | batch | prec | backend | median ms | p90 | p99 | img/s | compile s | % peak | "
           "engines | torch ops | shuffles | max diff | err vs fp32 | run |")


def load(args):
    rows = {}
    for arg in args:
        label, sep, path = arg.partition("=")
        if not sep or not label or not path:
            sys.exit(f"merge_results.py: `{arg}` is not LABEL=PATH")
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f"merge_results.py: {path}: {e}")
        for r in data.get("rows", []):
            if "median" not in r:
                continue  # a backend that failed in that run
            key = (r["model"], r["batch"], r["precision"], r["backend"])
            rows[key] = dict(r, run=label)
    return rows


def order(rows):
    models = [m for m in MODELS if any(k[0] == m for k in rows)]
    models += sorted({k[0] for k in rows} - set(models))
    return models


def row_line(r):
    return (f"| {r['model']} | {r['batch']} | {r['precision']} | {r['backend']} | "
            f"{r['median']:.3f} | {r['p90']:.3f} | {r['p99']:.3f} | {r['throughput']:.0f} | "
            f"{r.get('compile_s', 0):.1f} | {r.get('peak_pct', 0):.1f} | {r.get('engines', '')} | "
            f"{r.get('torch_ops', '')} | {r.get('shuffles', '')} | {r['max_diff']:.2e} | "
            f"{'%.2e' % r['err_fp32'] if 'err_fp32' in r else ''} | {r['run']} |")


def speedup(rows, model, batch, prec, peer):
    kiln = rows.get((model, batch, prec, "kiln"))
    other = rows.get((model, batch, prec, peer))
    if not kiln or not other:
        return "-"
    if kiln["run"] != other["run"]:
        return f"(not in one run: {kiln['run']}, {other['run']})"
    return f"{kiln['median']:.3f} / {other['median']:.3f} ({other['median'] / kiln['median']:.2f}x)"


def geomean_lines(rows):
    """A markdown table: per precision and batch, the geometric mean over models of the best
    torch.compile median / kiln's median (pairs from one run), naming the rows where kiln loses."""
    out = ["| prec | batch | models | geomean | kiln behind on |", "|---|---|---|---|---|"]
    for p in [p for p in PRECISIONS if any(k[2] == p for k in rows)]:
        for b in sorted({k[1] for k in rows}):
            ratios, behind = [], []
            for m in order(rows):
                kiln = rows.get((m, b, p, "kiln"))
                peers = [rows[(m, b, p, peer)] for peer in PEERS if (m, b, p, peer) in rows]
                peers = [r for r in peers if kiln and r["run"] == kiln["run"]]
                if not kiln or not peers:
                    continue
                ratio = min(r["median"] for r in peers) / kiln["median"]
                ratios.append(ratio)
                if ratio < 1:
                    behind.append(f"{m} {ratio:.2f}x")
            if ratios:
                g = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
                out.append(f"| {p} | {b} | {len(ratios)} | {g:.2f}x | {', '.join(behind)} |")
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = load(sys.argv[1:])
    models = order(rows)
    precisions = [p for p in PRECISIONS if any(k[2] == p for k in rows)]
    batches = sorted({k[1] for k in rows})
    out = []
    for prec in precisions:
        out += ["", f"## {prec}", "", COLUMNS, "|" + "---|" * (COLUMNS.count("|") - 1)]
        for m in models:
            for b in batches:
                here = [r for k, r in rows.items() if k[:3] == (m, b, prec)]
                here.sort(key=lambda r: (BACKENDS.index(r["backend"])
                                         if r["backend"] in BACKENDS else len(BACKENDS),
                                         r["backend"]))
                out += [row_line(r) for r in here]
    for peer in PEERS:
        if not any(k[3] == peer for k in rows):
            continue
        cols = [(p, b) for p in precisions for b in batches]
        out += ["", f"## kiln vs torch.compile {peer} (speed-up, same run)", "",
                "| model | " + " | ".join(f"{p} b{b}" for p, b in cols) + " |",
                "|---|" + "---|" * len(cols)]
        for m in models:
            out.append(f"| {m} | " + " | ".join(speedup(rows, m, b, p, peer) for p, b in cols) +
                       " |")
    out += ["", "## Geometric mean of kiln's speed-up against the best torch.compile mode (same run)",
            ""] + geomean_lines(rows)
    print("\n".join(out).lstrip("\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
