"""Measuring placements on many workers at once, on Ray (`placer train --workers N`).

`spec.py` (what a worker builds its measurer from), `ownership.py` (GPUs, pinned cores, alike
devices), `ray_cluster.py` (Ray: install, join or start, room), `actor.py` (one measuring actor),
`pool.py` (`RayMeasurer`: the batch spread over the actors, faults), `outliers.py` (workers
that disagree), `cli.py` (the train command's options). Ray is imported only when a pool starts.
"""

from placer.workers.pool import NoWorkersLeft, RayMeasurer
from placer.workers.spec import RealSpec, WorkerNeeds, WorkerSpec

__all__ = ["NoWorkersLeft", "RayMeasurer", "RealSpec", "WorkerNeeds", "WorkerSpec"]
