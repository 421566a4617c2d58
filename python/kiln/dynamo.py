"""torch.compile(model, backend="kiln"): each graph Dynamo hands over is traced to TorchScript and
compiled by kiln, or, with "inductor" in backend_priority, exported and split between kiln's
engines and Inductor.
Registered under the name "kiln" when the package is imported, and through the
torch_dynamo_backends entry point of an installed package (no import needed)."""
import torch

from ._logging import logger

# Graphs Dynamo handed over: compiled by kiln, or left to PyTorch (each with a warning logged).
stats = {"compiled": 0, "in_pytorch": 0}


class _WithWeights(torch.nn.Module):
    """Dynamo's graph with the module's parameters and buffers bound: Dynamo passes them as graph
    inputs (marked static), kiln wants them as constants, to fold batch norms, pre-pack weights
    and build engines around them. They are buffers of this module, which tracing and
    torch.export both see as weights; like any compiled engine, the result keeps the weights it
    was compiled with."""

    def __init__(self, gm, example_inputs, static):
        super().__init__()
        self.gm = gm
        self.count = len(example_inputs)
        self.static = sorted(static)
        for i in self.static:
            self.register_buffer(f"input_{i}", example_inputs[i].detach())

    def forward(self, *args):
        rest = iter(args)
        return self.gm(*[getattr(self, f"input_{i}") if i in self.static else next(rest)
                         for i in range(self.count)])


def backend(gm, example_inputs, options=None, mode=None):
    """A Dynamo backend: returns a callable running `gm` on kiln, or `gm` itself (with a warning)
    where a graph cannot be compiled; Dynamo's graph breaks and guards are its own business.
    torch.compile(..., options={...}) gives kiln.compile's options (enabled_precisions,
    min_block_size, ...); a bad option is an error there, not a silent fallback. With
    backend_priority=["cuda", "inductor"] (or "cpu") what kiln's engines do not take is
    compiled by Inductor instead of running in PyTorch."""
    from ._compile import compile as kiln_compile, _check_options
    from . import Error, InvalidArgument

    if not all(isinstance(x, torch.Tensor) for x in example_inputs):
        logger.warning("kiln: a graph with non-tensor inputs (symbolic sizes) runs in PyTorch")
        stats["in_pytorch"] += 1
        return gm
    options = dict(options or {})
    if mode is not None:
        raise InvalidArgument(f"torch.compile(mode={mode!r}): the kiln backend takes options, "
                              f"not modes")
    for key in ("inputs", "arg_inputs"):
        if key in options:
            raise InvalidArgument(f"torch.compile options: {key} come from Dynamo's graph")
    _check_options(options)
    static = {i for i, x in enumerate(example_inputs)
              if getattr(x, "_dynamo_static_input_type", None) is not None}
    dynamic = [x for i, x in enumerate(example_inputs) if i not in static]
    try:
        # With "inductor" in backend_priority kiln.compile exports the graph and splits it
        # between kiln and Inductor.
        compiled = kiln_compile(_WithWeights(gm, example_inputs, static).eval(), inputs=dynamic,
                                **options)
    except InvalidArgument:
        raise
    except Error as e:
        logger.warning("kiln: a graph of %d nodes runs in PyTorch: %s", len(gm.graph.nodes), e)
        stats["in_pytorch"] += 1
        return gm
    stats["compiled"] += 1
    # What the graph returns, read off its output node (not by running it once more).
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    returns_tuple = isinstance(output.args[0], (tuple, list))

    def run(*args):
        # Dynamo passes every graph input; the parameters and buffers are bound in the engine.
        out = compiled(*[a for i, a in enumerate(args) if i not in static])
        # fx graphs from Dynamo return tuples; a traced one-output module returns the tensor.
        return (out,) if returns_tuple and not isinstance(out, (tuple, list)) else out

    return run


def _register():
    try:
        from torch._dynamo import list_backends, register_backend
    except ImportError:  # a torch without Dynamo
        return
    if "kiln" not in list_backends(exclude_tags=()):
        register_backend(name="kiln")(backend)


_register()
