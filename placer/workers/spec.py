"""What a worker needs to build its own measurer: a picklable spec, sent to every actor.

A spec names the devices one worker owns (the placement's device list), says which resources
that takes (cores to pin, GPUs for Ray's `num_gpus`), how long one placement may take before
the worker counts as hung, and builds the measurer inside the actor. `RealSpec` is what
`placer train --workers` uses (in either engine); tests subclass `WorkerSpec` with deterministic measurers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from placer.devices import Device, parse_device
from placer.measure.measurement import Measurer

if TYPE_CHECKING:   # torch comes with them: a simulated worker need not load it
    from placer.graph.opgraph import OpGraph
    from placer.measure.measurer import MeasureProtocol
    from placer.program.training import TrainingSpec


@dataclass(frozen=True)
class WorkerNeeds:
    """What one worker takes from its node: cores pinned to it, GPUs Ray gives it."""

    cores: int = 0
    gpus: int = 0


@dataclass
class WorkerSpec:
    """Base of every spec: the device list of one worker and how to measure on it."""

    devices: list[str]                 # device specs, as --devices gives them (cuda:0[mem=4GiB], cpu:1)
    timeout_s: float = 600.0           # a placement not measured after this long: the worker hangs

    @property
    def device_names(self) -> list[str]:
        """The names placements use (options dropped)."""
        return [d.name for d in self.parsed_devices()]

    def parsed_devices(self) -> list[Device]:
        return [parse_device(d) for d in self.devices]

    def needs(self) -> WorkerNeeds:
        """One core per CPU device thread, one GPU per CUDA device."""
        parsed = self.parsed_devices()
        return WorkerNeeds(cores=sum(d.threads or 1 for d in parsed if d.kind == "cpu"),
                           gpus=sum(d.kind == "cuda" for d in parsed))

    def describe(self) -> dict[str, Any]:
        """What must be the same on every worker for their figures to compare (runs in the actor)."""
        from placer.workers.ownership import fingerprint

        return fingerprint(self.parsed_devices())

    def build(self) -> Measurer:
        """The measurer this worker measures with (runs in the actor, after its cores are pinned)."""
        raise NotImplementedError


@dataclass
class RealSpec(WorkerSpec):
    """A real measurer of `graph` (shapes bound, sent once to every worker) on the devices, in
    `engine` (a `RealMeasurer` over that engine); on the training objective each
    worker times training steps with `training`'s loss, targets and optimizer."""

    graph: OpGraph | None = None
    protocol: MeasureProtocol | None = None
    seed: int = 0
    training: TrainingSpec | None = None
    engine: str = "torch"

    def __post_init__(self) -> None:
        if self.protocol is None:
            from placer.measure.measurer import MeasureProtocol

            self.protocol = MeasureProtocol()
        # Every warm-up and timed run may take the whole step timeout, and building the executor
        # takes a moment more: past that the worker is not slow but stuck.
        steps = self.protocol.warmup + self.protocol.repeats
        self.timeout_s = steps * self.protocol.timeout_s + 60.0

    def build(self) -> Measurer:
        from placer.measure.measurer import measurer_for

        return measurer_for(self.engine, self.graph, self.devices, self.protocol, seed=self.seed,
                            training=self.training)
