"""torch.compile(model, backend="kiln"): each graph Dynamo hands over is traced to TorchScript and
compiled by kiln; the ATen frontend will take Dynamo's graphs directly once it exists.
Registered under the name "kiln" when the package is imported, and through the
torch_dynamo_backends entry point of an installed package (no import needed)."""
import torch

from ._logging import logger

# Graphs Dynamo handed over: compiled by kiln, or left to PyTorch (each with a warning logged).
stats = {"compiled": 0, "in_pytorch": 0}


def backend(gm, example_inputs, **options):
    """A Dynamo backend: returns a callable running `gm` on kiln, or `gm` itself (with a warning)
    where a graph cannot be compiled; Dynamo's graph breaks and guards are its own business."""
    from ._compile import compile as kiln_compile
    from . import Error

    if not all(isinstance(x, torch.Tensor) for x in example_inputs):
        logger.warning("kiln: a graph with non-tensor inputs (symbolic sizes) runs in PyTorch")
        stats["in_pytorch"] += 1
        return gm
    try:
        compiled = kiln_compile(gm.eval(), inputs=list(example_inputs), **options)
    except Error as e:
        logger.warning("kiln: a graph of %d nodes runs in PyTorch: %s", len(gm.graph.nodes), e)
        stats["in_pytorch"] += 1
        return gm
    stats["compiled"] += 1

    def run(*args):
        out = compiled(*args)
        return out if isinstance(out, (tuple, list)) else (out,)

    # fx graphs from Dynamo return tuples; the traced module returns what they return.
    probe = gm(*example_inputs)
    if isinstance(probe, (tuple, list)):
        return run
    return compiled


def _register():
    try:
        from torch._dynamo import list_backends, register_backend
    except ImportError:  # a torch without Dynamo
        return
    if "kiln" not in list_backends(exclude_tags=()):
        register_backend(name="kiln")(backend)


_register()
