"""Device placement as a Gymnasium environment, registered as ``placer/DevicePlacement-v0`` by
``import placer`` (which this import implies), so that ``gymnasium.make`` finds it."""

from placer import ENV_ID
from placer.env.placement_env import PlacementEnv

__all__ = ["ENV_ID", "PlacementEnv"]
