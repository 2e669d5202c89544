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
from placer.measure.backward import training_prepared
from placer.measure.executor import ExecutionFailure, PlacedExecutor
from placer.measure.measurement import INVALID, KERNEL_ERROR, Measurement
from placer.measure.prepare import PreparedGraph, check_feeds, prepare, to_tensor
from placer.measure.training import TrainingSpec
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
    (default: `TrainingSpec()`)."""

    def __init__(self, graph: OpGraph, devices: Sequence[Device | str],
                 protocol: MeasureProtocol = MeasureProtocol(),
                 feeds: dict[str, np.ndarray] | None = None, seed: int = 0,
                 prepared: PreparedGraph | None = None, training: TrainingSpec | None = None) -> None:
        self.graph = graph
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
        return record

    def measure(self, placement: Placement) -> Measurement:
        """Run `placement`: warm-ups, then timed runs; a failure is a failed `Measurement`."""
        record = self.protocol_record()
        try:
            executor = PlacedExecutor(self.graph, placement, self.device_objs, prepared=self.prepared,
                                      training=self.training)
        except PlacerError as exc:
            return Measurement(ok=False, failure=INVALID, reason=str(exc), protocol=record)
        except ExecutionFailure as exc:
            return Measurement(ok=False, failure=exc.failure, reason=str(exc), protocol=record,
                               peak_memory=dict(exc.peak_memory))
        try:
            times = []
            for i in range(self.protocol.warmup + self.protocol.repeats):
                start = time.perf_counter()
                executor.run(self.feeds, timeout_s=self.protocol.timeout_s)
                elapsed = time.perf_counter() - start
                if i >= self.protocol.warmup:
                    times.append(elapsed)
            median, spread = step_statistics(times)
            return Measurement(ok=True, step_time=median, spread=spread, times=times,
                               peak_memory=executor.peak_memory, protocol=record)
        except ExecutionFailure as exc:
            log.info("placement failed (%s): %s", exc.failure, exc)
            return Measurement(ok=False, failure=exc.failure, reason=str(exc),
                               peak_memory=executor.peak_memory, protocol=record)
        except (RuntimeError, ValueError) as exc:
            return Measurement(ok=False, failure=KERNEL_ERROR, reason=f"{type(exc).__name__}: {exc}",
                               protocol=record)
        finally:
            executor.close()
