"""Worker specs for the Ray tests: the deterministic simulator in every worker, some with a fault
planted at the k-th measurement of the run."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placer.graph.opgraph import OpGraph
from placer.measure.measurement import Measurement
from placer.costmodel.simulator import SimulatedMeasurer
from placer.placement import Placement
from placer.workers.spec import WorkerNeeds, WorkerSpec

try:
    import ray
    # The actors unpickle these specs: send their code along, since the tests are not importable there.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
except ImportError:   # the Ray tests skip themselves
    pass

DEVICES = ["cpu:0", "cpu:1"]


@dataclass
class SimSpec(WorkerSpec):
    """The analytic simulator in every worker; takes no cores unless asked, so many workers fit."""

    graph: OpGraph | None = None
    fingerprint: str = "alike"
    cores: int = 0

    def needs(self) -> WorkerNeeds:
        return WorkerNeeds(cores=self.cores)

    def describe(self) -> dict[str, Any]:
        return {"simulator": self.fingerprint}

    def build(self) -> SimulatedMeasurer:
        return SimulatedMeasurer(self.graph, self.parsed_devices())


@dataclass
class FaultySpec(SimSpec):
    """Simulated, but the `at`-th measurement of the run (counted across all workers, from 0)
    dies (`die`), dies at every measurement from then on (`die_always`) or hangs (`hang`: it
    writes its pid to `hanging` first, so a test can find and kill it). One of the first
    `odd_out` workers to start describes its devices differently (`odd` in `counter_dir`)."""

    counter_dir: str = ""
    fault: str = "die"
    at: int = 3
    odd_out: bool = False

    def describe(self) -> dict[str, Any]:
        if self.odd_out and _claim(Path(self.counter_dir) / "odd"):
            return {"simulator": "different"}
        return super().describe()

    def build(self) -> SimulatedMeasurer:
        return FaultyMeasurer(self.graph, self.parsed_devices(), self)


class FaultyMeasurer(SimulatedMeasurer):
    def __init__(self, graph: OpGraph, devices: list, spec: FaultySpec) -> None:
        super().__init__(graph, devices)
        self.spec = spec

    def measure(self, placement: Placement) -> Measurement:
        k = _next_count(Path(self.spec.counter_dir))
        if k == self.spec.at or (self.spec.fault == "die_always" and k > self.spec.at):
            if self.spec.fault == "hang":
                (Path(self.spec.counter_dir) / "hanging").write_text(str(os.getpid()))
                time.sleep(600)
            os._exit(1)
        return super().measure(placement)


def _claim(path: Path) -> bool:
    """Create `path`; False when another process did first (atomic across processes)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False


def _next_count(directory: Path) -> int:
    """0, 1, 2, ... across every process that counts in `directory`."""
    k = 0
    while not _claim(directory / f"measured-{k}"):
        k += 1
    return k


