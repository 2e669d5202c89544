"""Device placement as a Gymnasium environment; importing this package registers
``placer/DevicePlacement-v0`` so that ``gymnasium.make`` finds it."""

import gymnasium

from placer.env.placement_env import PlacementEnv

ENV_ID = "placer/DevicePlacement-v0"

if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point="placer.env.placement_env:PlacementEnv")

__all__ = ["ENV_ID", "PlacementEnv"]
