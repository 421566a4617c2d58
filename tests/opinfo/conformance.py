#!/usr/bin/env python3
"""OpInfo conformance (issue #35): PyTorch's own op samples through kiln, as a new user tries them.

Every op of PyTorch's OpInfo database (torch.testing._internal's op_db), in each dtype asked for
that torch supports on the CPU, with its first usable sample input, is traced into a module of that
one op, compiled by the kiln package (min_block_size 1, TF32 off: the ops' own semantics) for the
CPU, or with --device cuda for the GPU (inputs to the GPU, outputs back), and run next to PyTorch
on the same device.

    conformance.py [--dtypes float32,float16,int64] [--budget N] [--ops NAME,...]
                   [--device cpu|cuda] [--json OUT] [--require-no-wrong]

Outcomes, one per (op, dtype):
  engine         compiled, every op in engines, outputs match PyTorch
  no op          compiled to nothing: the op returns its input (atleast_2d of a matrix, contiguous,
                 a cast to the input's own dtype), outputs match PyTorch
  fallback       compiled, some op left in PyTorch (with its reason), outputs match
  wrong          compiled and ran, outputs differ from PyTorch
  compile error  kiln.compile raised
  run error      the compiled module raised where PyTorch did not
  crash          the process compiling or running it died (an abort, a segfault)
  skipped        not counted: random by design, no sample of tensors and numbers, not traceable
                 or PyTorch itself fails on the sample
--budget N takes N of the items spread evenly over the sorted list (CI); without it, all.
Each item runs in a worker process; when the worker dies, the item it was on is a crash and a new
worker goes on with the next. --require-no-wrong exits 1 if any answer is wrong or anything
crashed. Needs the package (PYTHONPATH=build/python) and the `expecttest` package.
"""
import argparse
import collections
import json
import os
import subprocess
import sys

# Ops whose results are random by design (or uninitialized memory): listed, not counted.
RANDOM_WORDS = ("dropout", "rand", "bernoulli", "multinomial", "normal", "uniform", "empty",
                "exponential", "geometric", "log_normal", "cauchy", "rrelu")

# Ops whose integer outputs are indices into their input along a dim: with ties (samples of f16
# or integers), other indices of equal values are as right as torch's (its sort is not stable).
INDEX_OPS = {"sort", "argsort", "topk", "msort", "kthvalue"}

OUTCOMES = ["engine", "no op", "fallback", "wrong", "compile error", "run error", "crash",
            "skipped"]


def item_list(dtypes, ops, budget):
    """The (name, dtype, op index) items, sorted, filtered and spread to the budget."""
    from torch.testing._internal.common_methods_invocations import op_db
    items = []
    for i, op in enumerate(op_db):
        name = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        if ops and op.name not in ops and name not in ops:
            continue
        for d in dtypes:
            items.append((name, d, i))
    items.sort()
    if budget and budget < len(items):
        step = len(items) / budget
        items = [items[int(k * step)] for k in range(budget)]
    return items


def flat_tensors(value):
    """The tensors of an op's output (a dense real tensor, or nested tuples/lists of them), else
    None."""
    import torch
    if isinstance(value, torch.Tensor):
        return [value] if value.layout == torch.strided and not value.is_complex() else None
    if isinstance(value, (tuple, list)):
        out = []
        for v in value:
            t = flat_tensors(v)
            if t is None:
                return None
            out += t
        return out
    return None


def usable_sample(op, dtype):
    """The first sample whose input is a dense tensor and whose other arguments are tensors,
    numbers, strings, None or lists of numbers (what a traced module takes or bakes in)."""
    import torch

    def plain(v):
        if isinstance(v, torch.Tensor):
            return v.layout == torch.strided and not v.is_complex()
        if isinstance(v, (list, tuple)):
            return all(isinstance(e, (int, float, bool)) for e in v)
        return v is None or isinstance(v, (int, float, bool, str, torch.dtype))

    samples = op.sample_inputs("cpu", dtype, requires_grad=False)
    for k, s in enumerate(samples):
        if k >= 20:
            break
        args = [s.input, *s.args]
        if not isinstance(s.input, torch.Tensor) or s.input.numel() == 0:
            continue
        if all(plain(a) for a in args) and all(plain(v) for v in s.kwargs.values()):
            return s
    return None


class OneOp:
    """A module calling one op, its tensor arguments as the module's inputs."""

    @staticmethod
    def build(op, sample):
        import torch
        args = [sample.input, *sample.args]
        kwargs = dict(sample.kwargs)
        tensor_args = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        tensor_kwargs = [k for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
        inputs = [args[i] for i in tensor_args] + [kwargs[k] for k in tensor_kwargs]

        class Module(torch.nn.Module):
            def forward(self, *tensors):
                a, kw = list(args), dict(kwargs)
                for i, t in zip(tensor_args, tensors):
                    a[i] = t
                for k, t in zip(tensor_kwargs, tensors[len(tensor_args):]):
                    kw[k] = t
                return op.op(*a, **kw)

        return Module().eval(), inputs


def close(actual, expected, dtype):
    """max|a - b| <= rtol * max|b| + atol over finite values; NaN and inf where PyTorch has them;
    integers and bools exact."""
    import torch
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return f"got {actual.dtype}{list(actual.shape)}, PyTorch {expected.dtype}{list(expected.shape)}"
    if not expected.is_floating_point():
        return "" if torch.equal(actual, expected) else "integer values differ"
    a, b = actual.double(), expected.double()
    if not torch.equal(torch.isnan(a), torch.isnan(b)):
        return "NaN where PyTorch has a number, or the reverse"
    inf = torch.isinf(b)
    if not torch.equal(a[inf], b[inf]):
        return "infinities differ"
    finite = torch.isfinite(b) & torch.isfinite(a)
    if not torch.equal(finite, torch.isfinite(b)):
        return "inf where PyTorch has a number"
    if finite.sum() == 0:
        return ""
    rtol, atol = (1e-2, 1e-3) if dtype == torch.float16 else (1e-4, 1e-5)
    diff = (a[finite] - b[finite]).abs().max().item()
    scale = b[finite].abs().max().item()
    return "" if diff <= rtol * scale + atol else f"max diff {diff:.3g} at scale {scale:.3g}"


def run_item(op, dtype_name, kiln, device="cpu"):
    """The outcome of one op in one dtype: a dict with outcome and detail."""
    import torch
    dtype = getattr(torch, dtype_name)
    if any(w in op.name for w in RANDOM_WORDS):
        return {"outcome": "skipped", "detail": "random by design"}
    if dtype not in op.supported_dtypes("cpu"):
        return {"outcome": "skipped", "detail": f"torch has no {dtype_name} {op.name} on the CPU"}
    try:
        sample = usable_sample(op, dtype)
    except Exception as e:  # noqa: BLE001 (the sample generator itself)
        return {"outcome": "skipped", "detail": f"no samples: {type(e).__name__}"}
    if sample is None:
        return {"outcome": "skipped", "detail": "no sample of tensors and numbers"}
    module, inputs = OneOp.build(op, sample)
    try:
        with torch.no_grad():
            # PyTorch's answer on the device compiled for (its CUDA ops may differ from its CPU
            # ones in what they support and in the dtypes of secondary outputs).
            expected = flat_tensors(module(*[t.clone().to(device) for t in inputs]))
            if expected is None:
                return {"outcome": "skipped", "detail": "output is not dense real tensors"}
            expected = [e.cpu() for e in expected]
            traced = torch.jit.trace(module, tuple(t.clone() for t in inputs), check_trace=False)
    except Exception as e:  # noqa: BLE001
        return {"outcome": "skipped", "detail": f"PyTorch or tracing fails: {type(e).__name__}"}
    precisions = {torch.float16, torch.float32} if dtype == torch.float16 else {torch.float32}
    try:
        compiled = kiln.compile(traced, inputs=[kiln.Input(shape=tuple(t.shape), dtype=t.dtype)
                                                for t in inputs],
                                min_block_size=1, enabled_precisions=precisions, progress=False,
                                device=device, disable_tf32=True)
    except Exception as e:  # noqa: BLE001
        return {"outcome": "compile error", "detail": first_line(e)}
    report = compiled.kiln_report
    try:
        with torch.no_grad():
            actual = flat_tensors(compiled(*[t.clone().to(device) for t in inputs]))
            actual = None if actual is None else [a.cpu() for a in actual]
    except Exception as e:  # noqa: BLE001
        return {"outcome": "run error", "detail": first_line(e)}
    if actual is None or len(actual) != len(expected):
        return {"outcome": "wrong", "detail": "a different number of outputs"}
    for k, (a, b) in enumerate(zip(actual, expected)):
        why = close(a, b, dtype)
        if why and op.name in INDEX_OPS and same_values_at(inputs[0], a, b):
            why = ""
        if why:
            return {"outcome": "wrong", "detail": f"output {k}: {why}"}
    engines = sum(1 for s in report["segments"] if s["target"] == "engine")
    if engines > 0 and report["torch_ops"] == 0:
        return {"outcome": "engine", "detail": ""}
    if engines == 0 and report["torch_ops"] == 0 and not report["segments"]:
        return {"outcome": "no op", "detail": "the op is its input (a view or no-op of it)"}
    reasons = sorted(set(report.get("fallback", []))) or ["no engine segment"]
    return {"outcome": "fallback", "detail": "; ".join(reasons)}


def same_values_at(x, actual, expected):
    """Whether two index tensors pick equal values of x along some dim (ties); indices of a
    reduced dim (kthvalue without keepdim) are compared as if kept."""
    import torch
    if actual.dtype != torch.int64 or actual.shape != expected.shape or \
            actual.dim() not in (x.dim(), x.dim() - 1):
        return False
    for d in range(x.dim()):
        a, e = (actual, expected) if actual.dim() == x.dim() else \
            (actual.unsqueeze(d), expected.unsqueeze(d))
        try:
            if torch.equal(torch.take_along_dim(x, a, d), torch.take_along_dim(x, e, d)):
                return True
        except (RuntimeError, IndexError):
            continue
    return False


def first_line(e):
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


def worker(args):
    """Runs items from --start on, a JSON line before and after each."""
    import warnings
    warnings.filterwarnings("ignore")
    import torch  # noqa: F401
    import kiln
    from torch.testing._internal.common_methods_invocations import op_db
    torch.set_num_threads(1)
    items = item_list(args.dtypes.split(","), set(filter(None, args.ops.split(","))), args.budget)
    for k in range(args.start, len(items)):
        name, d, i = items[k]
        print(json.dumps({"begin": k, "op": name, "dtype": d}), flush=True)
        torch.manual_seed(0)
        result = run_item(op_db[i], d, kiln, args.device)
        print(json.dumps(dict(result, end=k, op=name, dtype=d)), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtypes", default="float32")
    p.add_argument("--budget", type=int, default=0, help="items to run (0: all)")
    p.add_argument("--ops", default="", help="only these ops (comma-separated names)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="the device kiln compiles for and PyTorch answers on")
    p.add_argument("--json", default="", help="write every item's outcome here")
    p.add_argument("--require-no-wrong", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)

    results, start = [], 0
    while True:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--start", str(start),
               "--dtypes", args.dtypes, "--budget", str(args.budget), "--ops", args.ops,
               "--device", args.device]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        current = None
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if "begin" in msg:
                current = msg
            else:
                results.append(msg)
                current = None
        stderr = proc.stderr.read()
        code = proc.wait()
        if current is None:
            if code != 0:
                sys.exit(f"conformance: the worker failed before any op (exit {code}):\n"
                         f"{stderr[-2000:]}")
            break
        results.append({"outcome": "crash", "op": current["op"], "dtype": current["dtype"],
                        "end": current["begin"], "detail": f"worker died (exit {code}): "
                        f"{(stderr.strip().splitlines() or [''])[-1][:200]}"})
        start = current["begin"] + 1
    report(results, args)
    bad = [r for r in results if r["outcome"] in ("wrong", "crash")]
    return 1 if args.require_no_wrong and bad else 0


def report(results, args):
    counts = collections.Counter(r["outcome"] for r in results)
    counted = sum(n for o, n in counts.items() if o != "skipped")
    print(f"# OpInfo conformance on {args.device}: {len(results)} items ({args.dtypes}"
          f"{', budget %d' % args.budget if args.budget else ''})\n")
    print("| outcome | items | share of counted |\n|---|---|---|")
    for o in OUTCOMES:
        share = f"{100.0 * counts[o] / counted:.1f}%" if counted and o != "skipped" else ""
        print(f"| {o} | {counts[o]} | {share} |")
    print(f"\nin an engine: {counts['engine']} of {counted} counted items "
          f"({100.0 * counts['engine'] / max(counted, 1):.1f}%); nothing left in PyTorch (engine "
          f"or no op): {counts['engine'] + counts['no op']} "
          f"({100.0 * (counts['engine'] + counts['no op']) / max(counted, 1):.1f}%)\n")
    for o in ("wrong", "crash", "compile error", "run error"):
        for r in results:
            if r["outcome"] == o:
                print(f"{o}: {r['op']} ({r['dtype']}): {r['detail']}")
    by_reason = collections.defaultdict(list)
    for r in results:
        if r["outcome"] == "fallback":
            for reason in r["detail"].split("; "):
                by_reason[reason.split(": ", 1)[-1] if ": " in reason else reason].append(r["op"])
    if by_reason:
        print("\nfalls back, by reason:")
        for reason, ops in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            print(f"- {reason} ({len(ops)}): {', '.join(sorted(set(ops)))}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
