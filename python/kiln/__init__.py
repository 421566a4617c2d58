"""kiln: compile PyTorch models into modules whose supported parts run in kiln's engine.

    import kiln, torch
    compiled = kiln.compile(model.eval(), inputs=[torch.randn(1, 3, 224, 224)])
    kiln.save(compiled, "model.ts")      # kiln.load("model.ts") in another process
    kiln.refit(compiled, tuned_model)    # new weights, same engines (compile refittable=True)
    torch.compile(model, backend="kiln")  # the Dynamo backend
    kiln.compile(model.eval(), inputs=[x], backend_priority=["cuda", "inductor"])
                                         # what kiln's engines leave, compiled by Inductor

The API follows torch_tensorrt's (compile, Input, save, load), so that switching is a change of
import. Arguments are checked by the C++ compiler and its errors raised here with its message:
kiln.InvalidArgument (also a ValueError), kiln.Unsupported, kiln.ShapeMismatch,
kiln.DeviceError, kiln.CorruptInput, all subclasses of kiln.Error (a RuntimeError).
"""
import importlib.util as _util
import os as _os

import torch as _torch

# The runtime library (the kiln.Engine torch class and kiln::execute_engine op) before _kiln,
# which links it: compiled modules need it loaded to deserialize and run. It lies beside _kiln,
# which an editable install keeps apart from these sources.
_EXTENSION = _util.find_spec("kiln._kiln")
if _EXTENSION is None or not _EXTENSION.origin:
    raise ImportError("kiln: the extension module _kiln is missing; build the project (make) or "
                      "install the package (pip install --no-build-isolation .)")
RUNTIME_LIBRARY = _os.path.join(_os.path.dirname(_EXTENSION.origin), "libkiln_runtime.so")
_torch.ops.load_library(RUNTIME_LIBRARY)

from . import _kiln  # noqa: E402
from ._compile import (Input, SupportReport, compile, load, refit,  # noqa: E402
                       register_atomic_subgraph, save, support_report)
from ._inductor import KilnInductorModule  # noqa: E402
from ._logging import set_log_level  # noqa: E402

Error = _kiln.Error
InvalidArgument = _kiln.InvalidArgument
Unsupported = _kiln.Unsupported
ShapeMismatch = _kiln.ShapeMismatch
DeviceError = _kiln.DeviceError
CorruptInput = _kiln.CorruptInput
InternalError = _kiln.InternalError

from . import dynamo as _dynamo  # noqa: E402  (registers torch.compile's backend "kiln")

__all__ = ["compile", "Input", "save", "load", "refit", "support_report", "SupportReport",
           "register_atomic_subgraph", "KilnInductorModule",
           "set_log_level", "Error", "InvalidArgument", "Unsupported", "ShapeMismatch",
           "DeviceError", "CorruptInput", "InternalError", "RUNTIME_LIBRARY"]
