"""kiln.compile and its companions: specs in, TorchScript bytes through the C++ compiler, a
loaded module out."""
import io
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Mapping

import torch

from . import _inductor, _kiln
from ._logging import logger

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.int64: "i64", torch.int32: "i32", torch.int8: "i8", torch.uint8: "u8",
           torch.bool: "bool"}
_DTYPES_BY_NAME = {name: dtype for dtype, name in _DTYPES.items()}


def _dtype_name(dtype, what):
    if isinstance(dtype, str):
        return dtype  # the C++ parser names what it does not know
    if dtype in _DTYPES:
        return _DTYPES[dtype]
    raise _kiln.InvalidArgument(
        f"{what}: dtype {dtype} is not one kiln runs (float32, float16, bfloat16, int64, int32, "
        f"int8, uint8, bool)")


class Input:
    """One forward argument: Input(shape=...) for a static shape, or Input(min_shape=...,
    opt_shape=..., max_shape=...) for dynamic dims (the engine is built for the range and tuned
    at opt), with its dtype and memory format (torch.contiguous_format or torch.channels_last)."""

    def __init__(self, shape=None, min_shape=None, opt_shape=None, max_shape=None,
                 dtype=torch.float32, format=torch.contiguous_format):
        ranged = [s is not None for s in (min_shape, opt_shape, max_shape)]
        if shape is not None and any(ranged):
            raise _kiln.InvalidArgument("Input: give shape or min_shape/opt_shape/max_shape, "
                                        "not both")
        if shape is not None:
            min_shape = opt_shape = max_shape = shape
        elif not all(ranged):
            raise _kiln.InvalidArgument(
                "Input: give shape, or all of min_shape, opt_shape and max_shape")
        self.min_shape, self.opt_shape, self.max_shape = (
            tuple(int(d) for d in s) for s in (min_shape, opt_shape, max_shape))
        if not len(self.min_shape) == len(self.opt_shape) == len(self.max_shape):
            raise _kiln.InvalidArgument(
                f"Input: min_shape {self.min_shape}, opt_shape {self.opt_shape} and max_shape "
                f"{self.max_shape} have different ranks")
        for lo, opt, hi in zip(self.min_shape, self.opt_shape, self.max_shape):
            if not 0 <= lo <= opt <= hi:
                raise _kiln.InvalidArgument(
                    f"Input: need 0 <= min <= opt <= max in every dim, got min_shape "
                    f"{self.min_shape}, opt_shape {self.opt_shape}, max_shape {self.max_shape}")
        if format not in (torch.contiguous_format, torch.channels_last):
            raise _kiln.InvalidArgument(f"Input: format {format} is not torch.contiguous_format "
                                        f"or torch.channels_last")
        self.dtype, self.format = dtype, format

    @classmethod
    def from_tensor(cls, t):
        fmt = (torch.channels_last if t.dim() == 4 and not t.is_contiguous()
               and t.is_contiguous(memory_format=torch.channels_last)
               else torch.contiguous_format)
        return cls(shape=tuple(t.shape), dtype=t.dtype, format=fmt)

    def example(self, device="cpu"):
        """A tensor of opt_shape to trace with."""
        if self.dtype in (torch.float32, torch.float16, torch.bfloat16):
            return torch.randn(self.opt_shape, device=device).to(self.dtype)
        if self.dtype == torch.bool:
            return torch.zeros(self.opt_shape, dtype=torch.bool, device=device)
        return torch.ones(self.opt_shape, dtype=self.dtype, device=device)

    def _spec(self):
        return {"min_shape": list(self.min_shape), "opt_shape": list(self.opt_shape),
                "max_shape": list(self.max_shape), "dtype": _dtype_name(self.dtype, "Input"),
                "format": "channels_last" if self.format == torch.channels_last
                else "contiguous"}

    def __repr__(self):
        if self.min_shape == self.max_shape:
            return f"Input(shape={self.opt_shape}, dtype={self.dtype})"
        return (f"Input(min_shape={self.min_shape}, opt_shape={self.opt_shape}, "
                f"max_shape={self.max_shape}, dtype={self.dtype})")


def _inputs(inputs):
    if inputs is None:
        return None, None
    if isinstance(inputs, (torch.Tensor, Input)):
        inputs = [inputs]
    specs, examples = [], []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            specs.append(Input.from_tensor(x))
            examples.append(x)
        elif isinstance(x, Input):
            specs.append(x)
            examples.append(None)
        else:
            raise _kiln.InvalidArgument(
                f"inputs[{i}]: expected a torch.Tensor or kiln.Input, got {type(x).__name__}")
    return specs, examples


def _device(device, examples):
    if device is None:
        for x in examples or []:
            if x is not None and x.is_cuda:
                return f"cuda:{x.device.index or 0}"
        return "cpu"
    return str(device)


def _script(module, specs, examples):
    """The module as the C++ module _kiln takes (torch._C.ScriptModule): a ScriptModule as it is,
    an nn.Module traced."""
    if isinstance(module, torch.jit.ScriptModule):
        scripted = module
    elif isinstance(module, torch.nn.Module):
        if module.training:
            raise _kiln.InvalidArgument(
                "the module is in training mode; call .eval() on it before compiling "
                "(dropout and batch norm statistics would be traced as in training)")
        if specs is None:
            raise _kiln.InvalidArgument(
                "inputs: an nn.Module needs example tensors or kiln.Input specs to be traced")
        # Specs without a tensor are traced with one where the module's weights are.
        weight = next(module.parameters(), None)
        where = weight.device if weight is not None else "cpu"
        traced_with = tuple(x if x is not None else s.example(where)
                            for s, x in zip(specs, examples))
        try:
            with torch.no_grad():
                scripted = torch.jit.trace(module, traced_with, check_trace=False)
        except Exception as e:  # noqa: BLE001 (any tracing failure, named)
            raise _kiln.Unsupported(
                f"could not trace {type(module).__name__} with inputs "
                f"{[tuple(t.shape) for t in traced_with]}: {str(e).strip().splitlines()[0]} "
                f"(script it with torch.jit.script and pass the ScriptModule)") from e
    else:
        raise _kiln.InvalidArgument(
            f"expected a torch.nn.Module or torch.jit.ScriptModule, got {type(module).__name__}")
    return _to_kiln(scripted)


def _to_kiln(scripted):
    """A ScriptModule as _kiln takes it: its C++ module where the two share torch's pybind11
    types (they do when built against the same torch), else its torch.jit.save bytes."""
    if _kiln.shares_torch_types():
        return scripted._c
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    return buffer.getvalue()


def _wrap(cpp_module, report_json, summary):
    """A ScriptModule of the C++ module _kiln returns, with what compile did: `kiln_report` (a
    dict: segments, ops in engines and in PyTorch, time per phase) and `kiln_summary`."""
    if isinstance(cpp_module, bytes):
        module = torch.jit.load(io.BytesIO(cpp_module))
    else:
        module = torch.jit._recursive.wrap_cpp_module(cpp_module)
    # object.__setattr__: a ScriptModule's own would try to make them TorchScript attributes.
    object.__setattr__(module, "kiln_report", json.loads(report_json))
    object.__setattr__(module, "kiln_summary", summary)
    return module


class _Progress:
    """Phases and engines on one updating line of stderr, when it is a terminal."""

    def __init__(self, enabled):
        self.enabled = sys.stderr.isatty() if enabled is None else bool(enabled)
        self.start = time.monotonic()

    def __call__(self, phase, detail):
        if self.enabled:
            text = f"[kiln {time.monotonic() - self.start:6.1f}s] {phase}: {detail}"
            sys.stderr.write("\r" + text[:120].ljust(120))
            sys.stderr.flush()

    def done(self):
        if self.enabled:
            sys.stderr.write("\r" + " " * 120 + "\r")
            sys.stderr.flush()


_SPEC_KEYS = {"min_block_size", "torch_executed_ops", "torch_executed_modules",
              "require_full_compilation", "backend_priority", "backend_support_map",
              "enable_resource_partitioning", "cpu_memory_budget", "workspace_size", "truncate_long_and_double",
              "assume_dynamic_shape_support",
              "disable_tf32", "exact_gelu", "switches", "refittable", "engine_cache",
              "engine_cache_dir", "engine_cache_size", "print_after_all"}


def _op_name(op, where):
    """"aten::add.Tensor" for torch.ops.aten.add.Tensor, "aten::add" for torch.ops.aten.add, a
    string as it is."""
    if isinstance(op, str):
        return op
    if isinstance(op, torch._ops.OpOverload):
        return op.name()
    if isinstance(op, torch._ops.OpOverloadPacket):
        return op._qualified_op_name
    raise _kiln.InvalidArgument(
        f"{where}: expected op names or torch.ops overloads, got {op!r}")


def _pattern_ops(module):
    """The op chain of an nn.Module's forward, scripted: its nodes but constants and list
    packing, in order."""
    try:
        graph = torch.jit.script(module).inlined_graph
    except Exception as e:  # noqa: BLE001 (any scripting failure, named)
        raise _kiln.InvalidArgument(
            f"register_atomic_subgraph: cannot script {type(module).__name__}: "
            f"{str(e).strip().splitlines()[0]}") from e
    skip = {"prim::Constant", "prim::ListConstruct", "prim::TupleConstruct", "prim::GetAttr"}
    ops = []
    for node in graph.nodes():
        if node.kind() in skip:
            continue
        if list(node.blocks()):
            raise _kiln.InvalidArgument(
                f"register_atomic_subgraph: {type(module).__name__} has control flow "
                f"({node.kind()}); a pattern is a chain of ops")
        ops.append(node.kind())
    return ops


def register_atomic_subgraph(pattern=None, *, name=None, init_args=()):
    """Registers an atomic subgraph: an op chain kiln never splits across two segments (resource
    partitioning, min_block_size), as the engine fuses it. `pattern` is a list of ops (each a
    name "aten::relu", a torch.ops overload, or a list of alternatives) or an nn.Module class,
    whose forward (scripted, built with `init_args`) gives the chain; as a decorator,
    @kiln.register_atomic_subgraph or @kiln.register_atomic_subgraph(init_args=...). Built in:
    conv -> batch norm -> activation, conv -> activation, mul -> add, mul -> mul."""
    if pattern is None:
        return lambda cls: register_atomic_subgraph(cls, name=name, init_args=init_args)
    if isinstance(pattern, type) and issubclass(pattern, torch.nn.Module):
        _kiln.register_atomic_subgraph(name or pattern.__qualname__,
                                       _pattern_ops(pattern(*init_args)))
        return pattern
    if isinstance(pattern, (str, bytes)) or not hasattr(pattern, "__iter__"):
        raise _kiln.InvalidArgument(
            f"register_atomic_subgraph: expected a list of ops or an nn.Module class, got "
            f"{pattern!r}")
    if name is None:
        raise _kiln.InvalidArgument("register_atomic_subgraph: a list of ops needs a name=")
    steps = []
    for step in pattern:
        alternatives = step if isinstance(step, (list, tuple, set)) else [step]
        steps.append("|".join(_op_name(op, "pattern") for op in alternatives))
    _kiln.register_atomic_subgraph(name, steps)
    return pattern


def _check_options(options):
    """InvalidArgument naming every option kiln.compile does not take."""
    known = _SPEC_KEYS | {"enabled_precisions", "device", "debug", "progress"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise _kiln.InvalidArgument(
            f"unknown option(s) {', '.join(unknown)} (kiln.compile takes inputs, "
            f"{', '.join(sorted(known))})")


def _export_bytes(program):
    """An ExportedProgram as torch.export.save writes it, which kiln's ATen frontend reads."""
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()


def _spec(specs, device, enabled_precisions, debug, options):
    """The C++ compiler's spec (a dict, sent as JSON) of kiln.compile's arguments; `options`
    are the checked further options (_check_options)."""
    options = dict(options)
    precisions = {_dtype_name(p, "enabled_precisions")
                  for p in (enabled_precisions or {torch.float32})}
    precisions.add("f32")
    spec = {"inputs": [s._spec() for s in specs or []], "device": device,
            "enabled_precisions": sorted(precisions), "debug": bool(debug)}
    for key in ("torch_executed_ops", "torch_executed_modules", "switches"):
        if key in options:
            value = options.pop(key)
            if isinstance(value, str) or not hasattr(value, "__iter__"):
                raise _kiln.InvalidArgument(f"{key}: expected a list of names, got {value!r}")
            spec[key] = [str(v) for v in value]
    if "backend_priority" in options:
        value = options.pop("backend_priority")
        if isinstance(value, str) or not hasattr(value, "__iter__"):
            raise _kiln.InvalidArgument(
                f"backend_priority: expected a list of backends, got {value!r}")
        spec["backend_priority"] = [str(v) for v in value]
    if "backend_support_map" in options:
        value = options.pop("backend_support_map")
        if not isinstance(value, dict):
            raise _kiln.InvalidArgument(
                f"backend_support_map: expected a dict of backend to op names, got {value!r}")
        spec["backend_support_map"] = {
            str(backend): sorted({_op_name(op, f"backend_support_map[{backend!r}]")
                                  for op in ops})
            for backend, ops in value.items()}
    if isinstance(options.get("engine_cache_dir"), os.PathLike):
        options["engine_cache_dir"] = os.fspath(options["engine_cache_dir"])
    spec.update(options)
    return spec


def compile(module, ir="default", inputs=None, arg_inputs=None, enabled_precisions=None,
            device=None, debug=False, progress=None, **options):
    """Compiles `module` (an nn.Module in eval mode, traced with `inputs`, a ScriptModule, or a
    torch.export.ExportedProgram, read by kiln's ATen frontend, whose export gives the input
    shapes unless `inputs` does) and returns a ScriptModule that runs it: supported segments in kiln's engine, the rest in
    PyTorch. `inputs`: example tensors or kiln.Input specs, one per forward argument.
    `enabled_precisions`: the dtypes layers may run in ({torch.float32} by default; float32 is
    always allowed). `device`: "cpu" (default unless the inputs are on a GPU), "cuda" or
    "cuda:N". Further options, as torch_tensorrt names them: min_block_size,
    torch_executed_ops, torch_executed_modules, require_full_compilation, backend_priority
    and backend_support_map (engines of several backends: "cuda", "cpu"; each op to the first
    whose map entry lists it, by name or torch.ops overload; "inductor" last: what the engines
    leave is compiled by Inductor, in a kiln.KilnInductorModule, which cannot be saved, unless
    the engines take it all), enable_resource_partitioning and
    cpu_memory_budget (engine segments split until each one's build fits), workspace_size,
    truncate_long_and_double, assume_dynamic_shape_support (every converter taken as right for
    dynamic dims; unset, a node with a dynamic input dim whose converter does not declare them
    runs in PyTorch), disable_tf32, exact_gelu; and kiln's switches, refittable
    (engines kiln.refit can give new weights without a rebuild), engine_cache (True: compiled
    modules and built engines are stored and loaded again by later compiles: the same model
    compiled the same way again is a load; engine_cache_dir, default
    $KILN_ENGINE_CACHE_DIR or ~/.cache/kiln/engines; engine_cache_size in bytes, default 5 GiB)
    and print_after_all. debug=True logs every graph after each phase (logger "kiln").
    The result carries `kiln_report` (a dict: segments, op counts, time per phase) and
    `kiln_summary` (the same as text); progress=True/False forces the progress line on stderr
    (default: on when stderr is a terminal)."""
    exported = isinstance(module, torch.export.ExportedProgram)
    if ir not in ("default", "ts", "torchscript", "exported_program", "dynamo"):
        if ir == "torch_compile":
            raise _kiln.Unsupported(
                f"ir={ir!r}: use torch.compile(model, backend='kiln') for torch.compile")
        raise _kiln.InvalidArgument(
            f"ir={ir!r}: expected 'default', 'ts', 'exported_program' or 'dynamo'")
    if ir in ("exported_program", "dynamo") and not exported:
        raise _kiln.InvalidArgument(
            f"ir={ir!r}: expected a torch.export.ExportedProgram (torch.export.export(model, "
            f"args)), got {type(module).__name__}")
    if exported and ir in ("ts", "torchscript"):
        raise _kiln.InvalidArgument(f"ir={ir!r}: an ExportedProgram is not TorchScript")
    _check_options(options)
    if arg_inputs is not None:
        if inputs is not None:
            raise _kiln.InvalidArgument("give inputs or arg_inputs, not both")
        inputs = arg_inputs
    specs, examples = _inputs(inputs)
    device = _device(device, examples)
    priority = options.get("backend_priority")
    if priority is not None and (isinstance(priority, str) or not hasattr(priority, "__iter__")):
        raise _kiln.InvalidArgument(
            f"backend_priority: expected a list of backends, got {priority!r}")
    if priority is not None and _inductor.INDUCTOR in [str(b) for b in priority]:
        return _inductor.compile(module, specs, examples, device, enabled_precisions, debug,
                                 progress, options)
    if exported:
        # Through the ATen frontend, as torch.export.save writes it; without inputs, the
        # export's shapes and range constraints give them.
        data = _export_bytes(module)
    else:
        data = _script(module, specs, examples)
    spec = _spec(specs, device, enabled_precisions, debug, options)
    bar = _Progress(progress)
    previous_level, handler = _kiln.log_level(), None
    if debug:
        # The graphs after each phase are debug messages: let them through, and show them on
        # stderr unless the application has configured the "kiln" logger itself.
        _kiln.set_log_level("debug")
        if not logger.hasHandlers():
            handler = logging.StreamHandler()
            logger.addHandler(handler)
        previous_logger_level = logger.level
        logger.setLevel(logging.DEBUG)
    try:
        run = _kiln.compile_exported if exported else _kiln.compile
        out, report_json, summary = run(data, json.dumps(spec), bar)
    finally:
        bar.done()
        if debug:
            _kiln.set_log_level(previous_level)
            logger.setLevel(previous_logger_level)
            if handler is not None:
                logger.removeHandler(handler)
    logger.info("%s", summary)
    return _wrap(out, report_json, summary)


def refit(compiled, module):
    """`compiled` (kiln.compile(..., refittable=True), or kiln.load of its save) with the weights
    of `module`: the same architecture with new weights, as an nn.Module in eval mode (traced at
    the compiled input shapes), a ScriptModule or an ExportedProgram, given as `compiled` was.
    Its engines take the new weights without a rebuild; `compiled` is left as it is. A state dict
    is loaded into the model first: model.load_state_dict(sd); kiln.refit(compiled, model).
    Raises kiln.InvalidArgument naming the engine and weight when the new weights do not fit."""
    if not isinstance(compiled, torch.jit.ScriptModule) or not hasattr(compiled, "kiln_spec"):
        raise _kiln.InvalidArgument(
            f"kiln.refit: expected a module kiln.compile made (with refittable=True), got "
            f"{type(compiled).__name__}" +
            ("" if not isinstance(compiled, torch.jit.ScriptModule) else " without kiln_spec"))
    if isinstance(module, Mapping):
        raise _kiln.InvalidArgument(
            "kiln.refit: got a state dict; load it into the model and pass the model "
            "(model.load_state_dict(state_dict); kiln.refit(compiled, model))")
    exported = isinstance(module, torch.export.ExportedProgram)
    if exported:
        data = _export_bytes(module)
    else:
        spec = json.loads(compiled.kiln_spec)
        specs = [Input(min_shape=i["min"], opt_shape=i["opt"], max_shape=i["max"],
                       dtype=_DTYPES_BY_NAME[i["dtype"]]) for i in spec["inputs"]]
        data = _script(module, specs, [None] * len(specs))
    out, report_json, summary = _kiln.refit(_to_kiln(compiled), data, exported)
    logger.info("%s", summary)
    return _wrap(out, report_json, summary)


def save(module, path):
    """Saves a compiled module (any ScriptModule) to `path`, written whole or not at all."""
    if isinstance(module, _inductor.KilnInductorModule):
        raise _kiln.InvalidArgument(
            "kiln.save: a module split between kiln and Inductor runs Inductor's Python code, "
            "which TorchScript cannot save; compile without `inductor` in backend_priority to "
            "save it (what the engines leave then runs in PyTorch)")
    if not isinstance(module, torch.jit.ScriptModule):
        raise _kiln.InvalidArgument(
            f"kiln.save: expected a compiled module (a torch.jit.ScriptModule), got "
            f"{type(module).__name__}")
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix="kiln-", suffix=".part",
                               dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    try:
        torch.jit.save(module, tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load(path, map_location=None):
    """Loads a module saved by kiln.save (or torch.jit.save)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"kiln.load: no file {path}")
    try:
        return torch.jit.load(path, map_location=map_location)
    except RuntimeError as e:
        raise _kiln.CorruptInput(
            f"kiln.load: {path} is not a saved TorchScript module: "
            f"{str(e).strip().splitlines()[0]}") from e


class SupportReport:
    """Which ops of a module's method kiln's engine runs: `supported` (all of them), `unsupported`
    (one line per op it does not, with why) and the report's `text`."""

    def __init__(self, supported, text):
        self.supported = bool(supported)
        self.text = text
        self.unsupported = [line.strip() for line in text.splitlines() if line.strip()]

    def as_dict(self):
        return {"supported": self.supported, "unsupported": list(self.unsupported)}

    def __str__(self):
        if self.supported:
            return "every op is supported by kiln's engine"
        return "ops kiln's engine does not run:\n" + "\n".join(
            "  " + line for line in self.unsupported)

    __repr__ = __str__


def support_report(module, inputs=None, method="forward"):
    """The coverage report: which ops of `module` would stay in PyTorch, and why."""
    specs, examples = _inputs(inputs)
    data = _script(module, specs, examples)
    ok, text = _kiln.check_method_op_support(data, method)
    return SupportReport(ok, text)
