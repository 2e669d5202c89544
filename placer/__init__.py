"""placer: learn where each operation of an ONNX model should run, from measured step times.

Importing it registers the environment ``placer/DevicePlacement-v0`` with Gymnasium, so that
``gymnasium.make("placer/DevicePlacement-v0", graph="model.onnx")`` works; the environment's
module (`placer.env.placement_env`) loads only then."""

import gymnasium

from placer.errors import PlacerError
from placer.placement import Placement

ENV_ID = "placer/DevicePlacement-v0"

if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point="placer.env.placement_env:PlacementEnv")

__all__ = ["ENV_ID", "PlacerError", "Placement"]
__version__ = "0.1.0"
