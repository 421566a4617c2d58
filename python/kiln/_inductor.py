"""Inductor as a backend beside kiln's engines: backend_priority=["cuda", "inductor"] (or
"cpu") compiles what kiln's engines take with kiln and what they do not with Inductor,
torch.compile's compiler, so that a model with ops kiln does not convert still runs them
compiled instead of in eager PyTorch.

The graph is an ATen graph (torch.export's; the Dynamo backend exports Dynamo's graph). kiln's
partitioner says which ops its engines take (the coverage of the program lowered and
partitioned with the spec's settings, nothing built); torch.fx's capability partitioner groups
the nodes of those ops into pieces without cycles, and the nodes between kiln's pieces become
Inductor's pieces in graph order. min_block_size bounds both: a kiln piece of fewer ops goes to
Inductor, an Inductor piece of fewer ops to kiln (which runs what its engines do not convert in
PyTorch, within its module: a piece's calls cost more than a few ops save). Each
kiln piece is exported again and compiled by kiln.compile (a ScriptModule running engines);
each Inductor piece by torch._inductor.compile. The result is a torch.nn.Module (KilnInductorModule):
Inductor's code is Python, so it cannot be saved with torch.jit.save."""
import copy
import functools
import itertools
import json
import operator

import torch

from . import _kiln
from ._logging import logger

INDUCTOR = "inductor"


def _op_key(target):
    """kiln's name of an ATen overload: "aten::add.Tensor", "aten::relu" for .default."""
    return target.name()


def _kiln_options(options):
    """The options for kiln's pieces: backend_priority without Inductor, which must come last
    (it takes whatever the engines leave), and no support map entry for it."""
    priority = [str(b) for b in options["backend_priority"]]
    if priority.count(INDUCTOR) > 1:
        raise _kiln.InvalidArgument("backend_priority: `inductor` is listed twice")
    if priority[-1] != INDUCTOR:
        raise _kiln.InvalidArgument(
            f"backend_priority {priority}: `inductor` takes the ops kiln's engines leave, so it "
            f"comes last")
    if len(priority) == 1:
        raise _kiln.InvalidArgument(
            "backend_priority ['inductor']: name kiln's engine before it ('cuda' or 'cpu'); "
            "for Inductor alone, use torch.compile(model)")
    if INDUCTOR in (options.get("backend_support_map") or {}):
        raise _kiln.InvalidArgument(
            "backend_support_map: `inductor` takes every op the engines leave; give it no entry")
    out = dict(options)
    out["backend_priority"] = priority[:-1]
    return out


def _examples(module, specs, examples, device):
    """Tensors to export and run the pieces with: the given ones, or made from static
    kiln.Input specs, or the export's own."""
    if specs is None:
        if isinstance(module, torch.export.ExportedProgram):
            args, kwargs = module.example_inputs or ((), {})
            wanted = len(module.graph_signature.user_inputs)
            if kwargs or len(args) != wanted or not all(isinstance(a, torch.Tensor)
                                                        for a in args):
                raise _kiln.InvalidArgument(
                    "inputs: this ExportedProgram keeps no example tensors for its arguments; "
                    "give inputs")
            return [a.to(device) for a in args]
        raise _kiln.InvalidArgument(
            "inputs: an nn.Module needs example tensors or kiln.Input specs to be compiled")
    out = []
    for i, (spec, x) in enumerate(zip(specs, examples)):
        if spec.min_shape != spec.max_shape:
            raise _kiln.InvalidArgument(
                f"inputs[{i}]: {spec!r} has dynamic dims; with Inductor in backend_priority, "
                f"give static shapes")
        out.append(x.to(device) if x is not None else spec.example(device))
    return out


def _export(module, examples):
    try:
        return torch.export.export(module, tuple(examples), strict=False)
    except Exception as e:  # noqa: BLE001 (any export failure, named)
        raise _kiln.Unsupported(
            f"with Inductor in backend_priority the model is exported (torch.export.export), "
            f"which failed for {type(module).__name__}: {str(e).strip().splitlines()[0]}") from e


class _Support(torch.fx.passes.operator_support.OperatorSupportBase):
    """The ATen ops of an FX graph kiln's engines take: not forced to PyTorch
    (torch_executed_ops), listed by a backend's support map where every backend has one, and
    not among the ops the coverage report has none of in an engine (`refused`: lowering
    rewrites some ops into others, which the report names instead)."""

    def __init__(self, refused, spec):
        self.refused = refused
        self.absorbed = set()  # nodes kiln takes whatever their op (runs too short for Inductor)
        self.forced = set(spec.get("torch_executed_ops", ()))
        maps = spec.get("backend_support_map", {})
        priority = spec.get("backend_priority") or ["engine"]
        self.listed = (None if any(b not in maps for b in priority)
                       else set().union(*(maps[b] for b in priority)))

    def is_node_supported(self, submodules, node):
        if node.op != "call_function":
            return False
        if node.target is operator.getitem or node in self.absorbed:
            return True
        if not isinstance(node.target, torch._ops.OpOverload):
            return False
        key = _op_key(node.target)
        names = {key, key.split(".")[0]}
        if names & self.forced or key in self.refused:
            return False
        return self.listed is None or bool(names & self.listed)


def _compute_nodes(nodes):
    return [n for n in nodes if n.target is not operator.getitem]


def _op_count(gm):
    """The ATen ops of a graph module, those of its submodules included."""
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem:
            count += 1
        elif node.op == "call_module":
            count += _op_count(gm.get_submodule(node.target))
    return count


class _Piece(torch.nn.Module):
    """One piece of the split graph: a compiled callable and what compiled it."""

    def __init__(self, run, backend, ops, report=None, module=None):
        super().__init__()
        self.run = run
        self.backend = backend
        self.ops = ops
        self.report = report
        self.module = module  # kiln's ScriptModule, or the graph that runs eagerly

    def forward(self, *args):
        return self.run(*args)


class KilnInductorModule(torch.nn.Module):
    """A model split between kiln's engines and Inductor (kiln.compile with "inductor" in
    backend_priority): `pieces` in the order they run, `kiln_report` (a dict: the pieces with
    their backend, ops and, for kiln's, kiln's own report) and `kiln_summary`."""

    def __init__(self, split, out_spec, pieces, summary, args):
        super().__init__()
        self.split = split
        self.inputs = [(tuple(a.shape), a.dtype, a.device) for a in args]
        self.out_spec = out_spec
        self.pieces = pieces
        self.kiln_report = {
            "pieces": [{"backend": p.backend, "ops": p.ops,
                        **({"kiln_report": p.report} if p.report is not None else {})}
                       for p in pieces],
            "ops": {b: sum(p.ops for p in pieces if p.backend == b)
                    for b in sorted({p.backend for p in pieces})},
        }
        self.kiln_summary = summary

    def forward(self, *args):
        if len(args) != len(self.inputs):
            raise _kiln.InvalidArgument(
                f"forward takes {len(self.inputs)} tensor argument(s), got {len(args)}")
        for i, (a, (shape, dtype, device)) in enumerate(zip(args, self.inputs)):
            if not isinstance(a, torch.Tensor):
                raise _kiln.InvalidArgument(
                    f"input {i}: expected a tensor, got {type(a).__name__}")
            if tuple(a.shape) != shape or a.dtype != dtype or a.device != device:
                raise _kiln.ShapeMismatch(
                    f"input {i}: compiled for {list(shape)} {dtype} on {device}, got "
                    f"{list(a.shape)} {a.dtype} on {a.device}")
        with torch.no_grad():  # kiln's engines and these Inductor graphs are for inference
            flat = self.split(*args)
        if not isinstance(flat, (tuple, list)):
            flat = (flat,)
        return torch.utils._pytree.tree_unflatten(list(flat), self.out_spec)


def _inductor_piece(gm, args, name):
    """Inductor's compile of one piece, and its outputs on `args`; a piece Inductor cannot
    compile or run (no C++ compiler, no Triton) runs eagerly, with a warning."""
    import torch._inductor  # noqa: F401 (not imported by `import torch`)

    nodes = _op_count(gm)
    try:
        # Inductor's code is specialized for its example inputs' strides: it gets contiguous
        # tensors, at compile time and at run time (a no-op for kiln's engines' outputs).
        args = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        # Outside any compile in progress (the Dynamo backend calls this from Dynamo's): a
        # nested compile would add its guards to the outer one's.
        with torch._guards.tracing(None), torch._guards.compile_context(None):
            compiled = torch._inductor.compile(gm, args)
            outputs = compiled(*args)  # kernels may be compiled at the first call

        def run(*xs):
            return compiled(*[x.contiguous() if isinstance(x, torch.Tensor) else x for x in xs])

        return _Piece(run, INDUCTOR, nodes, module=gm), outputs
    except Exception as e:  # noqa: BLE001 (Inductor's own failure: the piece runs eagerly)
        text = str(e).strip()
        logger.warning("kiln: Inductor could not compile %s (%d ops), which runs in PyTorch: %s",
                       name, nodes, text.splitlines()[0] if text else repr(e))
        return _Piece(gm, "pytorch", nodes, module=gm), gm(*args)


def _kiln_piece(gm, args, kiln_compile, options):
    nodes = _op_count(gm)
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    returns_tuple = isinstance(output.args[0], (tuple, list))
    compiled = kiln_compile(_export(gm, args), inputs=list(args), **options)

    def run(*xs):
        out = compiled(*xs)
        return (out,) if returns_tuple and not isinstance(out, (tuple, list)) else out

    return _Piece(run, "kiln", nodes, compiled.kiln_report, compiled), compiled


def _weights_inside(fused):
    """The fused partitions with the weights they read as their own buffers: fusing passes each
    weight (a get_attr of the graph) as an argument, which kiln would compile as an input
    instead of a constant to fold and pre-pack."""
    for node in fused.graph.nodes:
        if node.op != "call_module":
            continue
        sub = fused.get_submodule(node.target)
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        args = []
        for arg, placeholder in zip(node.args, placeholders):
            if not (isinstance(arg, torch.fx.Node) and arg.op == "get_attr"):
                args.append(arg)
                continue
            value = functools.reduce(getattr, arg.target.split("."), fused)
            name = "weight_" + arg.target.replace(".", "_")
            sub.register_buffer(name, value.detach() if isinstance(value, torch.Tensor) else value)
            with sub.graph.inserting_before(placeholder):
                placeholder.replace_all_uses_with(sub.graph.get_attr(name))
            sub.graph.erase_node(placeholder)
        node.args = tuple(args)
        sub.recompile()
    fused.graph.eliminate_dead_code()
    fused.recompile()
    return fused


def _on_device(gm, device):
    """`gm` with its weights on `device`: itself when they are there, else a copy, since the
    program's weights are the user's model's (Module.to would move them)."""
    def tensors(module):
        for name, value in vars(module).items():
            if isinstance(value, torch.Tensor):  # constants: attributes, not buffers
                yield module, name, value
        for name, value in itertools.chain(module._parameters.items(), module._buffers.items()):
            if value is not None:
                yield module, name, value

    def elsewhere(t):
        return t.device.type != device.type or (device.index is not None and
                                                t.device.index != device.index)

    if not any(elsewhere(t) for m in gm.modules() for _, _, t in tensors(m)):
        return gm
    gm = copy.deepcopy(gm).to(device)
    for m in gm.modules():
        for module, name, t in list(tensors(m)):
            if elsewhere(t) and name in vars(module):
                setattr(module, name, t.to(device))
    return gm


def compile(module, specs, examples, device, enabled_precisions, debug, progress, options):
    """kiln.compile with "inductor" in backend_priority (its arguments, checked)."""
    options = _kiln_options(options)
    if isinstance(module, torch.jit.ScriptModule):
        raise _kiln.InvalidArgument(
            "backend_priority with `inductor`: Inductor compiles FX graphs, not TorchScript; "
            "pass the nn.Module or a torch.export.ExportedProgram")
    if isinstance(module, torch.nn.Module) and module.training:
        raise _kiln.InvalidArgument(
            "the module is in training mode; call .eval() on it before compiling")
    args = _examples(module, specs, examples, device)
    if isinstance(module, torch.export.ExportedProgram):
        program = module
    else:  # exported where its weights are; the pieces run on `device`
        weight = next(itertools.chain(module.parameters(), module.buffers()), None)
        where = weight.device if weight is not None else torch.device(device)
        program = _export(module, [a.to(where) for a in args])
    return compile_exported(program, args, device, enabled_precisions, debug, progress, options)


def compile_exported(program, args, device, enabled_precisions, debug, progress, options):
    """The split compile of an ExportedProgram whose forward takes the tensors `args`;
    `options` are kiln's (backend_priority without Inductor)."""
    from . import _compile
    import torch.fx.passes.infra.partitioner as partitioner
    from torch.fx.passes.split_module import split_module

    specs = [_compile.Input.from_tensor(a) for a in args]
    spec = _compile._spec(specs, device, enabled_precisions, debug, options)
    coverage = json.loads(_kiln.op_coverage(_compile._export_bytes(program), json.dumps(spec),
                                            True))
    refused = {op for op, c in coverage["ops"].items() if c["supported"] == 0}
    min_block = int(options.get("min_block_size", 3))

    gm = _on_device(program.module(), torch.device(device))
    # The export's input checks (KilnInductorModule checks its inputs itself).
    for node in list(gm.graph.nodes):
        if node.op == "call_module" and not node.users and node.target.startswith("_guards"):
            gm.graph.erase_node(node)
    gm.recompile()
    out_spec = program.call_spec.out_spec
    # kiln's partitions of min_block_size ops or more; a run of other ops (in graph order,
    # between two of kiln's) shorter than that is not worth a piece of its own, whose calls cost
    # more than its ops: kiln takes it, running what its engines do not convert in PyTorch
    # within its module. Repeated until no run is absorbed.
    compute = _compute_nodes(n for n in gm.graph.nodes if n.op == "call_function")
    support = _Support(refused, spec)
    while True:
        p = partitioner.CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
        kept = [part for part in p.propose_partitions()
                if len(_compute_nodes(part.nodes)) >= max(min_block, 1)]
        in_kiln = {n for part in kept for n in part.nodes}
        runs, run = [], []
        for node in compute:
            if node in in_kiln:
                runs.append(run)
                run = []
            else:
                run.append(node)
        runs.append(run)
        small = {n for r in runs if 0 < len(r) < min_block for n in r} - support.absorbed
        if not small:
            break
        support.absorbed |= small
    kiln_ops = sum(len(_compute_nodes(part.nodes)) for part in kept)
    kiln_kwargs = dict(enabled_precisions=enabled_precisions, device=device, debug=debug,
                       progress=progress, **options)
    if kiln_ops == len(compute) or not compute:
        # kiln's engines take it all: its ScriptModule, which saves like any other.
        return _compile.compile(program, inputs=list(args), **kiln_kwargs)

    fused = _weights_inside(p.fuse_partitions(kept)) if kept else gm
    # Pieces in graph order: each kiln partition alone (with the getitems of its outputs), the
    # nodes between two of them one Inductor piece. Every input of a node comes before it, so
    # a piece only reads pieces before it.
    piece_of, kinds, current = {}, [], None
    for node in fused.graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        if node.op == "call_module":
            kinds.append("kiln")
            piece_of[node] = len(kinds) - 1
            current = None
        elif node.target is operator.getitem and node.args[0] in piece_of and \
                kinds[piece_of[node.args[0]]] == "kiln":
            piece_of[node] = piece_of[node.args[0]]
        else:
            if current is None:
                kinds.append(INDUCTOR)
                current = len(kinds) - 1
            piece_of[node] = current
    split = split_module(fused, fused, lambda n: piece_of[n], keep_original_order=True)

    # The pieces compiled in the order they run, each with the outputs of the compiled pieces
    # before it as its example arguments (the strides Inductor's code is specialized for).
    pieces, lines = [], []

    class _Compile(torch.fx.Interpreter):
        def call_module(self, target, a, kw):
            index = int(target.rsplit("_", 1)[1])
            sub = getattr(split, target)
            if kinds[index] == "kiln":
                piece, compiled = _kiln_piece(sub, a, _compile.compile, kiln_kwargs)
                lines.append(f"piece {len(pieces)} kiln ({piece.ops} ops): " +
                             compiled.kiln_summary.strip().replace("\n", "\n  "))
                outputs = piece(*a)
            else:
                piece, outputs = _inductor_piece(sub, a, f"piece {len(pieces)}")
                ops = sorted({_op_key(n.target) for n in sub.graph.nodes
                              if n.op == "call_function" and
                              isinstance(n.target, torch._ops.OpOverload)})
                lines.append(f"piece {len(pieces)} {piece.backend} ({piece.ops} ops): " +
                             ", ".join(ops[:8]) + (", ..." if len(ops) > 8 else ""))
            setattr(split, target, piece)
            pieces.append(piece)
            return outputs

    with torch.no_grad():
        _Compile(split).run(*args)
    by_backend = {}
    for piece in pieces:
        by_backend[piece.backend] = by_backend.get(piece.backend, 0) + piece.ops
    head = (f"{len(pieces)} pieces, ops by backend: " +
            ", ".join(f"{b} {n}" for b, n in sorted(by_backend.items())))
    summary = head + "\n" + "\n".join(lines)
    logger.info("%s", summary)
    return KilnInductorModule(split, out_spec, torch.nn.ModuleList(pieces), summary,
                              args)
