"""xlafuse: see what XLA's kernel fusion does to real JAX/Flax models."""

from xlafuse.errors import HloParseError, UnknownNameError, UnknownPassError, XlafuseError

__all__ = ["HloParseError", "UnknownNameError", "UnknownPassError", "XlafuseError"]
__version__ = "0.1.0"
