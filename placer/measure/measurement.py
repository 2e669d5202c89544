"""`Measurement` (plain data) and the `Measurer` protocol: the only thing that knows about time."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from placer.engines.failures import KERNEL_ERROR, OOM, TIMEOUT
from placer.engines.protocol import PlacedRun
from placer.placement import Placement

# Why a placement failed: values of `Measurement.failure` (the engines' reasons, and a placement
# that is not valid for the graph or the devices).
INVALID = "invalid"
__all__ = ["INVALID", "KERNEL_ERROR", "OOM", "TIMEOUT", "Measurement", "Measurer", "MeasuresBatches", "OpensPlacements",
           "ReportsOnWorkers"]


@dataclass
class Measurement:
    """What measuring one placement gave: a step time, or a failure with its reason."""

    ok: bool
    step_time: float | None = None          # seconds, the robust statistic (median) of `times`
    spread: float | None = None             # seconds, interquartile range of `times`
    times: list[float] = field(default_factory=list)
    peak_memory: dict[str, int] = field(default_factory=dict)  # device name -> bytes
    failure: str | None = None              # OOM, TIMEOUT, KERNEL_ERROR or INVALID
    reason: str | None = None               # human-readable detail of the failure
    protocol: dict[str, Any] = field(default_factory=dict)     # how it was measured
    cached: bool = False                    # served from the measurer's cache
    # Measured in interleaved rounds (`placer.measure.rounds`): the 95% interval of `step_time`, and
    # the paired ratio to the reference measured in the same rounds ({"reference", "value", "low", ...})
    interval: dict[str, Any] | None = None
    paired: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


class Measurer(Protocol):
    """Turns a placement into a `Measurement`. Real, simulated and analytic ones plug in alike.
    One that measures several placements at once (a pool of workers) is also a `MeasuresBatches`,
    and one that spreads its work over workers a `ReportsOnWorkers`. One that runs placements
    for real is also an `OpensPlacements`, so that several placements can be measured in
    interleaved rounds (`placer.measure.rounds`)."""

    devices: list[str]   # device names, in the order placements index them

    def measure(self, placement: Placement) -> Measurement: ...


@runtime_checkable
class MeasuresBatches(Protocol):
    """A measurer that measures several placements at once (a pool of workers, the simulator's
    batched pass): each distinct placement of a batch in one call, in the batch's order."""

    def measure_many(self, placements: list[Placement]) -> list[Measurement]: ...


@runtime_checkable
class ReportsOnWorkers(Protocol):
    """A measurer that spreads its work over workers and says how it went (retries, workers lost,
    each worker's single-device figures): the run summary records it."""

    def report(self) -> dict[str, Any]: ...


@runtime_checkable
class OpensPlacements(Protocol):
    """A measurer that runs placements for real in an engine: `open` builds one as a `PlacedRun`
    to step in interleaved rounds, and `run_record` says how a step is run. Compare and a run's
    closing confirmation measure side by side, in rounds, exactly when their measurer is one."""

    def open(self, placement: Placement) -> PlacedRun: ...

    def run_record(self) -> dict[str, Any]: ...
