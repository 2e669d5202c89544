"""`RealMeasurer`: the step time of a placement, measured by running it with `PlacedExecutor`.

Warm-up runs first, then timed runs; the step time is their median and the spread their
interquartile range. A placement that runs out of memory, overruns the timeout or fails a kernel
gives a failed `Measurement` with the reason, never an exception. Every call measures: the one
who needs to remember measurements (the trainer) keeps them (`placer.policy.measurement_cache`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

from placer.devices import Device, as_devices
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.engines.torch.backward import training_prepared
from placer.engines.torch.executor import ExecutionFailure, PlacedExecutor
from placer.measure.measurement import INVALID, KERNEL_ERROR, Measurement
from placer.program.pipeline import Pipeline
from placer.kernels.prepare import PreparedGraph, check_feeds, prepare, to_tensor
from placer.program.training import TrainingSpec
from placer.placement import Placement

log = logging.getLogger(__name__)

OBJECTIVES = ("inference", "training")


@dataclass(frozen=True)
class MeasureProtocol:
    """How a placement is measured; recorded in every `Measurement`."""

    warmup: int = 2          # untimed runs first (allocator, caches, thread pools warm up)
    repeats: int = 5         # timed runs; the step time is their median
    timeout_s: float = 60.0  # limit of one step; a slower placement is a TIMEOUT failure
    objective: str = "inference"  # what a step is: the forward pass, or a whole training step

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.repeats < 1 or not self.timeout_s > 0:
            raise PlacerError("a measuring protocol needs warmup >= 0, repeats >= 1 and timeout_s > 0")
        if self.objective not in OBJECTIVES:
            raise PlacerError(f"unknown objective {self.objective!r}; choose one of {', '.join(OBJECTIVES)}")

    def to_dict(self) -> dict[str, float | int | str]:
        return {**asdict(self), "statistic": "median", "spread": "iqr"}


def random_feeds(graph: OpGraph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input: standard normal floats, zeros for integer inputs
    (always a valid token id or index), False for booleans."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for info in graph.inputs:
        if any(d <= 0 for d in info.shape):
            raise PlacerError(f"input {info.name!r} has an unbound dimension {info.shape}; "
                              f"bind it with --input-shape {info.name}=...")
        dtype = np.dtype(info.dtype)
        if dtype.kind == "f":
            feeds[info.name] = rng.standard_normal(info.shape).astype(dtype)
        else:
            feeds[info.name] = np.zeros(info.shape, dtype=dtype)
    return feeds


def step_statistics(times: list[float]) -> tuple[float, float]:
    """(median, interquartile range) of step times."""
    q1, median, q3 = np.percentile(np.asarray(times, dtype=np.float64), [25, 50, 75])
    return float(median), float(q3 - q1)


class RealMeasurer:
    """Measures placements of `graph` on `devices` for real (a `Measurer`). With the protocol's
    objective "training", a step is a training step with `training`'s loss and optimizer
    (default: `TrainingSpec()`). With `pipeline`, a step is a pipelined step of its micro-batches
    (`placer.program.pipeline`), each fed the same inputs."""

    def __init__(self, graph: OpGraph, devices: Sequence[Device | str],
                 protocol: MeasureProtocol = MeasureProtocol(),
                 feeds: dict[str, np.ndarray] | None = None, seed: int = 0,
                 prepared: PreparedGraph | None = None, training: TrainingSpec | None = None,
                 pipeline: Pipeline | None = None) -> None:
        self.graph = graph
        self.pipeline = pipeline if pipeline is not None and pipeline.pipelined else None
        self.device_objs = as_devices(devices)
        self.devices = [d.name for d in self.device_objs]
        self.protocol = protocol
        if training is not None and protocol.objective != "training":
            raise PlacerError("a training step's loss and optimizer were given to an inference protocol; "
                              "measure with MeasureProtocol(objective='training')")
        self.training = (training or TrainingSpec()) if protocol.objective == "training" else None
        if self.training is not None:
            # the trained paths run every step: prepared once here, not per placement
            self.prepared = training_prepared(graph, prepared)
        else:
            self.prepared = prepared if prepared is not None else prepare(graph)
        # `feeds` may override some inputs only: the rest stay random
        given = {**random_feeds(graph, seed), **(feeds or {})}
        tensors = check_feeds(graph, {k: to_tensor(v) if isinstance(v, np.ndarray) else v for k, v in given.items()})
        if any(d.kind == "cuda" for d in self.device_objs) and torch.cuda.is_available():
            tensors = {k: v.pin_memory() for k, v in tensors.items()}   # async host-to-device copies
        self.feeds = tensors

    def protocol_record(self) -> dict:
        """What every measurement records of how it was measured: the protocol, the devices, the
        training step's loss and optimizer."""
        record = {**self.protocol.to_dict(), "devices": [str(d) for d in self.device_objs]}
        if self.training is not None:
            record.update(self.training.to_dict())
        if self.pipeline is not None:
            record.update(self.pipeline.to_dict())
        return record

    def run_record(self) -> dict:
        """How a step is run, for placements timed in interleaved rounds (the rounds record the rest)."""
        return {k: v for k, v in self.protocol_record().items() if k not in ("warmup", "repeats")}

    def open(self, placement: Placement) -> ExecutorRun:
        """Build `placement`'s executor once, ready to be stepped (a `PlacementRun`); raises
        PlacerError (an invalid placement) or ExecutionFailure (e.g. over a memory cap)."""
        executor = PlacedExecutor(self.graph, placement, self.device_objs, prepared=self.prepared,
                                  training=self.training, pipeline=self.pipeline)
        return ExecutorRun(executor, self.feeds, self.protocol.timeout_s)

    def measure(self, placement: Placement) -> Measurement:
        """Run `placement`: warm-ups, then timed runs; a failure is a failed `Measurement`."""
        record = self.protocol_record()
        try:
            run = self.open(placement)
        except (PlacerError, ExecutionFailure) as exc:
            return failed_measurement(exc, record)
        try:
            times = []
            for i in range(self.protocol.warmup + self.protocol.repeats):
                elapsed = run.step()
                if i >= self.protocol.warmup:
                    times.append(elapsed)
            median, spread = step_statistics(times)
            return Measurement(ok=True, step_time=median, spread=spread, times=times,
                               peak_memory=run.peak_memory, protocol=record)
        except (ExecutionFailure, RuntimeError, ValueError) as exc:
            log.info("placement failed: %s", exc)
            return failed_measurement(exc, record, run.peak_memory)
        finally:
            run.close()


class ExecutorRun:
    """A `PlacementRun` of placer's torch executor: one step on fixed inputs, timed."""

    def __init__(self, executor: PlacedExecutor, feeds: dict, timeout_s: float) -> None:
        self.executor = executor
        self.feeds = feeds
        self.timeout_s = timeout_s

    def step(self) -> float:
        start = time.perf_counter()
        self.executor.run(self.feeds, timeout_s=self.timeout_s)
        return time.perf_counter() - start

    @property
    def peak_memory(self) -> dict[str, int]:
        return self.executor.peak_memory

    def close(self) -> None:
        self.executor.close()


def failed_measurement(exc: BaseException, protocol: dict, peak_memory: dict[str, int] | None = None) -> Measurement:
    """What a failure measures: an invalid placement, an execution failure (OOM, timeout, kernel)
    with its reason, or a kernel's own error."""
    if isinstance(exc, PlacerError):
        return Measurement(ok=False, failure=INVALID, reason=str(exc), protocol=protocol)
    if isinstance(exc, ExecutionFailure):
        return Measurement(ok=False, failure=exc.failure, reason=str(exc), protocol=protocol,
                           peak_memory=dict(exc.peak_memory or peak_memory or {}))
    return Measurement(ok=False, failure=KERNEL_ERROR, reason=f"{type(exc).__name__}: {exc}", protocol=protocol,
                       peak_memory=dict(peak_memory or {}))
