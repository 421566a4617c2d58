#!/usr/bin/env python3
"""kiln against PyTorch on one GPU, side by side in one process run (issue #8).

For each model, batch and precision it times eager PyTorch, TorchScript (frozen +
optimize_for_inference), torch.compile (reduce-overhead, max-autotune) and kiln (kiln.compile of
the Python package with device cuda, as a user would; --via export compiles torch.export's
program through the ATen frontend; --via kilnc runs the kilnc program instead, for trees without
the package), by CUDA events after warm-up, and prints a markdown table; JSON
goes to --out.
Columns follow trtexec / Torch-TensorRT's perf tools: median, p90, p99 latency, throughput,
compile time, the share of the measured fp16 tensor-core peak, kiln's engine segments and ops
left in PyTorch, the largest difference from eager's output in the same precision, and the error
against an fp32 reference (eager fp32 with TF32 off: max |out - ref| / max |ref|). `--models
suite` runs bench/models.py's SUITE; the summary gives, per precision and batch, the geometric
mean over models of kiln's speed-up against the best torch.compile mode of the same run. Backend kiln-notf32 is kiln with
--disable-tf32 (fp32 convolutions and matmuls in full f32 math instead of TF32), kiln-exactgelu
kiln with --exact-gelu (erf GELU after fp16 matmuls in its own pass, not the epilogue's tanh form),
kiln-interp kiln with pointwise layers on the interpreter kernel instead of generated kernels
(the switch cuda_codegen=off), kiln-cudnn-grouped kiln with grouped convolutions on cuDNN instead of
grouped.cu (cuda_grouped=cudnn), kiln-inductor kiln with backend_priority ["cuda", "inductor"] (what
the engines do not take compiled by Inductor instead of run in PyTorch; compiled from
torch.export's program; kiln-inductor-all with min_block_size 1, so that Inductor takes even one
op), and default torch.compile's default mode, which Inductor's pieces use. reduce-overhead-tf32
and max-autotune-tf32 (fp32 rows only) are those modes with fp32 matmuls on TF32 tensor cores
(torch.backends.cuda.matmul.allow_tf32), as kiln's fp32 by default: the fair peers of kiln's fp32
rows, and peers in the summary's geomean.
`--models fallback` runs bench/models.py's FALLBACK, models with ops kiln does not convert.
The text transformers (hf_bert, hf_distilbert, hf_gpt2, hf_clip_text, hf_llama) take token ids and
the attention mask of a padded batch, as users call them after a tokenizer (`--no-mask`: ids only).

Needs the package assembled in build/python (or, --via kilnc, build/bin/kilnc and
build/lib/libkiln_runtime.so) built with CUDA (tools/device/gpu-bench.sh).
"""
import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from models import FALLBACK, SEQ, SUITE, input_spec, make_model, max_diff  # noqa: E402 (bench/models.py)
from merge_results import COLUMNS, geomean_lines, row_line  # noqa: E402 (beside this file)


def time_cuda(fn, x, warmup, iters):
    """Median, p90 and p99 ms of fn(*x) (x: a tuple of arguments)."""
    for _ in range(warmup):
        fn(*x)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return {"median": statistics.median(times), "p90": times[int(0.9 * (len(times) - 1))],
            "p99": times[int(0.99 * (len(times) - 1))]}


def measured_peak_tflops():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    t = time_cuda(lambda: a @ b, (), 3, 10)["median"]
    return 2 * 8192 ** 3 / (t * 1e-3) / 1e12


def model_flops(model, x):
    try:
        from torch.utils.flop_counter import FlopCounterMode
        # With autograd on, nn.TransformerEncoder skips its fused fast path
        # (_transformer_encoder_layer_fwd), whose FLOPs the counter does not see.
        with FlopCounterMode(display=False) as counter, torch.enable_grad():
            model(*x)
        return counter.get_total_flops()
    except Exception:  # flop counting is a report column, not a reason to stop
        return None


# torch.compile's modes as backends; each with -tf32 appended (reduce-overhead-tf32) is the same
# mode with fp32 matmuls on TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32), the peer
# of kiln's fp32 rows, which use TF32 by default; fp32 rows only.
TORCH_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")

# kiln's backends and their kilnc flags: kiln's defaults run fp32 convolutions and matmuls in
# TF32 (as Torch-TensorRT's) and GELU after fp16 matmuls in the epilogue's tanh form.
KILN_BACKENDS = {"kiln": [], "kiln-notf32": ["--disable-tf32"],
                 "kiln-exactgelu": ["--exact-gelu"],
                 "kiln-interp": ["--switch", "cuda_codegen=off"],
                 "kiln-cudnn-grouped": ["--switch", "cuda_grouped=cudnn"], "kiln-inductor": None,
                 "kiln-inductor-all": None}
# The same as kiln.compile options, and builder switches.
KILN_OPTIONS = {"kiln": {}, "kiln-notf32": {"disable_tf32": True},
                "kiln-exactgelu": {"exact_gelu": True}, "kiln-interp": {},
                "kiln-cudnn-grouped": {},
                "kiln-inductor": {"backend_priority": ["cuda", "inductor"]},
                "kiln-inductor-all": {"backend_priority": ["cuda", "inductor"],
                                      "min_block_size": 1}}
KILN_SWITCHES = {"kiln-interp": ["cuda_codegen=off"],
                 "kiln-cudnn-grouped": ["cuda_grouped=cudnn"]}


PRECISIONS = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def kiln_compile_package(args, model, x, dtype, backend):
    """kiln.compile as a user would call it: traced on the CPU in fp32, or with --via export
    exported there by torch.export (the ATen frontend), compiled for cuda with f16 (bf16)
    allowed for fp16 (bf16) rows. Export and trace times are not in compile s.
    x: the tuple of example arguments (CPU)."""
    import kiln
    with torch.no_grad():
        if args.via == "export" or backend.startswith("kiln-inductor"):
            source = torch.export.export(model, x)
        else:
            source = torch.jit.trace(model, x, check_trace=False)
    precisions = {dtype, torch.float32}
    switches = [s for s in args.switches.split(",") if s] + KILN_SWITCHES.get(backend, [])
    start = time.time()
    compiled = kiln.compile(source, inputs=[kiln.Input(shape=tuple(t.shape), dtype=t.dtype)
                                            for t in x],
                            device="cuda", enabled_precisions=precisions, switches=switches,
                            progress=False, **KILN_OPTIONS[backend])
    seconds = time.time() - start
    rep = compiled.kiln_report
    if "pieces" in rep:  # split between kiln and Inductor
        kiln_reports = [p["kiln_report"] for p in rep["pieces"] if "kiln_report" in p]
        info = {k: sum(report_info(r)[k] for r in kiln_reports)
                for k in ("engines", "torch_ops", "shuffles")}
        info["torch_ops"] += sum(p["ops"] for p in rep["pieces"] if p["backend"] == "pytorch")
        return compiled, seconds, info
    return compiled, seconds, report_info(rep)


def report_info(rep):
    """The bench columns a kiln compile report gives: engines, ops left in PyTorch, and the
    shuffles that move data (transposes and layout changes) summed over the engines."""
    engines = [s for s in rep["segments"] if s["target"] == "engine"]
    return {"engines": len(engines), "torch_ops": rep["torch_ops"],
            "shuffles": sum(s.get("shuffles", 0) for s in engines)}


def kiln_compile(args, model, x, dtype, tmp, tag, extra_flags=()):
    """Traces on the CPU in fp32 (shape analysis runs there), compiles with kilnc for cuda."""
    path = os.path.join(tmp, tag + ".ts")
    out = os.path.join(tmp, tag + ".kiln.ts")
    report = os.path.join(tmp, tag + ".json")
    with torch.no_grad():
        torch.jit.trace(model, x, check_trace=False).save(path)
    cmd = [args.kilnc, path, out, *input_spec(x).split(), "--device", "cuda", "--report", report,
           "-q"]
    if dtype != torch.float32:
        cmd += ["-p", {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype], "-p", "f32"]
    cmd += list(extra_flags) + args.kilnc_flags.split()
    start = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.time() - start
    if r.returncode != 0:
        return None, seconds, {"error": (r.stderr or r.stdout).strip()[-400:]}
    with open(report) as f:
        rep = json.load(f)
    compiled = torch.jit.load(out)
    return compiled, seconds, report_info(rep)


def fp32_reference(model, x_cpu):
    """The model's output in fp32 with TF32 off, on the GPU: the reference of the error column."""
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.no_grad():
            m = copy.deepcopy(model).to("cuda", torch.float32)
            out = m(*(t.cuda() for t in x_cpu))
            del m
            return out.float() if not isinstance(out, (tuple, list)) else [o.float() for o in out]
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def relative_error(out, ref):
    """max |out - ref| / max |ref| over every output."""
    if isinstance(out, (tuple, list)):
        return max(relative_error(o, r) for o, r in zip(out, ref))
    ref = ref.double()
    return ((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def write_rows(out, peak, rows):
    """bench_gpu.json in `out` (made if missing): the device, its measured peak and the rows."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "bench_gpu.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "peak_tflops": peak, "rows": rows}, f,
                  indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", default="resnet50,mobilenet_v2,efficientnet_b0,vit_b_16,bert",
                   help="comma-separated bench/models.py names, `suite` (SUITE) or `fallback` "
                        "(FALLBACK)")
    p.add_argument("--via", choices=["package", "export", "kilnc"], default="package",
                   help="compile through the Python package (default), torch.export's program "
                        "through the package's ATen frontend (export), or the kilnc program")
    p.add_argument("--package-dir", default=None,
                   help="where the kiln package was assembled (--via package; default: "
                        "build-gpu/python where it exists, the device scripts' build, else "
                        "build/python)")
    p.add_argument("--switches", default="",
                   help="builder switches for every kiln backend, comma-separated "
                        "(--via package), e.g. gemm_timing=off")
    p.add_argument("--kilnc-flags", default="",
                   help="more kilnc flags for every kiln backend (--via kilnc), e.g. "
                        "'--switch conv_layout=auto'")
    p.add_argument("--batches", default="1,32")
    p.add_argument("--precisions", default="fp16,fp32", help="of fp16, bf16, fp32")
    p.add_argument("--backends", default="eager,torchscript,reduce-overhead,max-autotune,kiln")
    p.add_argument("--kilnc", default="build/bin/kilnc")
    p.add_argument("--runtime", default="build/lib/libkiln_runtime.so")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--no-mask", action="store_true",
                   help="call the text transformers with token ids only (default: ids and the "
                        "attention mask of a padded batch, as a tokenizer gives them)")
    p.add_argument("--seq", type=int, default=SEQ,
                   help=f"sequence length of the models of token ids (default {SEQ}; rows of "
                        "another are named model@seq)")
    args = p.parse_args()
    if args.package_dir is None:
        args.package_dir = next((d for d in ("build-gpu/python", "build/python")
                                 if os.path.isdir(d)), "build/python")
    if args.via in ("package", "export"):
        sys.path.insert(0, os.path.abspath(args.package_dir))
        import kiln  # noqa: F401 (loads its own copy of the runtime library)
    else:
        torch.ops.load_library(args.runtime)
    torch.backends.cudnn.benchmark = True
    peak = measured_peak_tflops()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"measured fp16 peak {peak:.0f} TFLOP/s", flush=True)
    rows = []
    # Models and plans of every row (GBs over a run); removed when the run ends, even by an error.
    tmp_dir = tempfile.TemporaryDirectory(prefix="kiln_bench_")
    tmp = tmp_dir.name
    models = {"suite": SUITE, "fallback": FALLBACK}.get(args.models, args.models.split(","))
    for name in models:
        for prec in args.precisions.split(","):
            dtype = PRECISIONS[prec]
            for batch in [int(b) for b in args.batches.split(",")]:
                torch.manual_seed(0)
                model, make_input = make_model(name, mask=not args.no_mask, seq=args.seq)
                model.eval()
                x_cpu = make_input(batch)
                x_cpu = tuple(x_cpu) if isinstance(x_cpu, (tuple, list)) else (x_cpu,)
                x = tuple(t.cuda().to(dtype) if t.is_floating_point() else t.cuda()
                          for t in x_cpu)
                gpu_model = copy.deepcopy(model).to("cuda", dtype)
                with torch.no_grad():
                    reference = gpu_model(*x)
                    flops = model_flops(gpu_model, x)
                    reference32 = fp32_reference(model, x_cpu)
                for backend in args.backends.split(","):
                    if backend.endswith("-tf32") and prec != "fp32":
                        continue  # the same as the peer without -tf32 below fp32
                    row = {"model": name if args.seq == SEQ else f"{name}@{args.seq}",
                           "batch": batch, "precision": prec, "backend": backend}
                    try:
                        with torch.no_grad():
                            start = time.time()
                            info = {}
                            inp = x
                            if backend == "eager":
                                fn = gpu_model
                            elif backend == "torchscript":
                                ts = torch.jit.freeze(torch.jit.trace(gpu_model, x, check_trace=False))
                                fn = torch.jit.optimize_for_inference(ts)
                                fn(*x)
                            elif backend.removesuffix("-tf32") in TORCH_COMPILE_MODES:
                                # The -tf32 peers: fp32 matmuls on TF32 tensor cores, as kiln's
                                # fp32 by default (convolutions are TF32 in torch by default).
                                torch.backends.cuda.matmul.allow_tf32 = backend.endswith("-tf32")
                                torch._dynamo.reset()
                                fn = torch.compile(gpu_model, mode=backend.removesuffix("-tf32"))
                                fn(*x)
                                fn(*x)
                            elif backend in KILN_BACKENDS:
                                if args.via in ("package", "export") or \
                                        backend.startswith("kiln-inductor"):
                                    fn, _, info = kiln_compile_package(args, model, x_cpu, dtype,
                                                                       backend)
                                else:
                                    fn, _, info = kiln_compile(args, model, x_cpu, dtype, tmp,
                                                               f"{name}_{prec}_{batch}",
                                                               KILN_BACKENDS[backend])
                                if fn is None:
                                    raise RuntimeError(info["error"])
                                # The traced module takes f32; with -p f16 the engine casts
                                # at its boundary and computes in f16.
                                inp = tuple(t.float() if t.is_floating_point() else t for t in x)
                            else:
                                raise ValueError(f"unknown backend {backend}")
                            row["compile_s"] = time.time() - start
                            row.update(info)
                            out = fn(*inp)
                            row["max_diff"] = max_diff(out, reference)
                            row["err_fp32"] = relative_error(out, reference32)
                            row.update(time_cuda(fn, inp, args.warmup, args.iters))
                    except Exception as e:  # a backend that fails is a row that says so
                        row["error"] = str(e).strip().splitlines()[0][:200] if str(e).strip() else repr(e)
                        with open(os.path.join(args.out, "bench_errors.log"), "a") as log:
                            log.write(f"== {name} {batch} {prec} {backend}\n")
                            traceback.print_exc(file=log)
                    torch.backends.cuda.matmul.allow_tf32 = False  # torch's default
                    if "median" in row:
                        row["throughput"] = batch / (row["median"] * 1e-3)
                        if flops:
                            row["peak_pct"] = 100 * flops / (row["median"] * 1e-3) / 1e12 / peak
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    # Every row so far, as it comes: a run cut off (a device call's time limit)
                    # keeps what it measured.
                    write_rows(args.out, peak, rows)
                    # Free the model copy each backend made (graphs, autotune caches).
                    torch.cuda.empty_cache()
    write_rows(args.out, peak, rows)
    ncols = COLUMNS.count("|") - 1
    lines = [COLUMNS, "|" + "---|" * ncols]
    for r in rows:
        if "median" not in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r['precision']} | {r['backend']} | "
                         f"failed: {r.get('error', '')[:80]} |" + " |" * (ncols - 5))
            continue
        lines.append(row_line(dict(r, run="this")))
    # The same summary merge_results.py gives, over this run's rows.
    timed = {(r["model"], r["batch"], r["precision"], r["backend"]): dict(r, run="this")
             for r in rows if "median" in r}
    lines += [""] + geomean_lines(timed)
    table = "\n".join(lines)
    with open(os.path.join(args.out, "bench_gpu.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
