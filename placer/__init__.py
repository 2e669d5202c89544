"""placer: learn where each operation of an ONNX model should run, from measured step times."""

from placer.errors import PlacerError
from placer.placement import Placement

__all__ = ["PlacerError", "Placement"]
__version__ = "0.1.0"
