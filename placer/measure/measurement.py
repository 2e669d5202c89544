"""`Measurement` (plain data) and the `Measurer` protocol: the only thing that knows about time."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from placer.placement import Placement

# Why a placement failed: values of `Measurement.failure`.
OOM, TIMEOUT, KERNEL_ERROR, INVALID = "oom", "timeout", "kernel_error", "invalid"


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
    One that measures several placements at once (a pool of workers) also has
    `measure_many(placements) -> list[Measurement]`, in the same order. One that runs placements
    for real also has `open(placement) -> PlacementRun`, so that several placements can be
    measured in interleaved rounds (`placer.measure.rounds`)."""

    devices: list[str]   # device names, in the order placements index them

    def measure(self, placement: Placement) -> Measurement: ...


class PlacementRun(Protocol):
    """One placement made ready to run (built once: parameters loaded, workers started), then
    stepped many times. `step` runs one step on the measurer's inputs and returns its seconds, or
    raises `placer.engines.torch.executor.ExecutionFailure`. Engines (placer's torch executor, ONNX
    Runtime) give the same object, so the rounds do not know which one they hold."""

    def step(self) -> float: ...

    @property
    def peak_memory(self) -> dict[str, int]: ...

    def close(self) -> None: ...
