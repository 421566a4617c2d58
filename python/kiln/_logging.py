"""kiln's C++ log messages go through Python's logging, to the logger "kiln"."""
import atexit
import logging

from . import _kiln

logger = logging.getLogger("kiln")

_LEVELS = {"error": logging.ERROR, "warning": logging.WARNING, "info": logging.INFO,
           "debug": logging.DEBUG, "graph": logging.DEBUG}


def _sink(level, message):
    logger.log(_LEVELS.get(level.lower(), logging.INFO), message)


def set_log_level(level):
    """What kiln's compiler logs: "error", "warning" (the default), "info", "debug" or "graph"
    (every graph after each phase). The "kiln" logger's own level still filters what is shown."""
    _kiln.set_log_level(str(level))


_kiln.set_log_sink(_sink)
# No Python callbacks once the interpreter is going away.
atexit.register(_kiln.set_log_sink, None)
