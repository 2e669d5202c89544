"""`MeasuringWorker`: one Ray actor. It owns its devices, builds its own measurer from the spec
and measures one placement at a time (Ray runs an actor's calls one after the other)."""

from __future__ import annotations

import os
import socket
from typing import Any

from placer.measure.measurement import Measurement
from placer.placement import Placement
from placer.workers.ownership import pin_process
from placer.workers.spec import WorkerSpec


class MeasuringWorker:
    """Wrapped by `ray.remote` in the pool; a plain class, so that it reads (and tests) as one."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.measurer = None

    def where(self) -> dict[str, Any]:
        """The node this worker runs on, its machine's address and the cores it may use there."""
        import ray

        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
        return {"node": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
                "host": socket.gethostname(), "pid": os.getpid(), "cores": cores}

    def start(self, cores: list[int] | None) -> dict[str, Any]:
        """Pin to `cores` (when given), build the measurer, and say what the devices are."""
        if cores:
            pin_process(cores)
        self.measurer = self.spec.build()
        return self.spec.describe()

    def measure(self, placement: Placement) -> Measurement:
        """Measure one placement."""
        return self.measurer.measure(placement)

    def measure_each(self, placements: list[Placement]) -> list[Measurement]:
        """Measure the placements one after the other (the calibration at start)."""
        return [self.measurer.measure(p) for p in placements]
