"""`RealMeasurer`: the step time of a placement, measured by running it in an engine.

The engine (`placer.engines`: placer's torch executor, or ONNX Runtime) builds the placement and
runs a step; measuring is the same for either. Warm-up runs first, then timed runs; the step time
is their median and the spread their interquartile range. A placement that runs out of memory,
overruns the timeout or fails a kernel gives a failed `Measurement` with the reason, never an
exception. Every call measures: the one who needs to remember measurements (the trainer) keeps
them (`placer.policy.measurement_cache`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from placer.devices import Device, as_devices
from placer.engines import check_engine, make_engine
from placer.engines.failures import ExecutionFailure
from placer.engines.protocol import PlacedRun
from placer.errors import PlacerError
from placer.graph.feeds import generated_inputs, generated_note, step_feeds
from placer.graph.opgraph import OpGraph
from placer.kernels.prepare import PreparedGraph
from placer.measure.measurement import INVALID, KERNEL_ERROR, Measurement
from placer.placement import Placement
from placer.program.pipeline import Pipeline
from placer.program.training import TrainingSpec

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


def step_statistics(times: list[float]) -> tuple[float, float]:
    """(median, interquartile range) of step times."""
    q1, median, q3 = np.percentile(np.asarray(times, dtype=np.float64), [25, 50, 75])
    return float(median), float(q3 - q1)


class RealMeasurer:
    """Measures placements of `graph` on `devices` for real (a `Measurer`), in `engine` ("torch":
    placer's executor, "onnxruntime"). With the protocol's objective "training", a step is a
    training step with `training`'s loss and optimizer (default: `TrainingSpec()`; the torch
    engine only). With `pipeline`, a step is a pipelined step of its micro-batches
    (`placer.program.pipeline`), each fed the same inputs. A step is fed the graph's sample inputs
    (`OpGraph.sample_inputs`, --inputs); `feeds` may override some inputs; the rest are random from
    `seed`, and a kernel that fails on them says so."""

    def __init__(self, graph: OpGraph, devices: Sequence[Device | str],
                 protocol: MeasureProtocol = MeasureProtocol(),
                 feeds: dict[str, np.ndarray] | None = None, seed: int = 0,
                 prepared: PreparedGraph | None = None, training: TrainingSpec | None = None,
                 pipeline: Pipeline | None = None, engine: str = "torch") -> None:
        check_engine(engine, protocol.objective)
        self.graph = graph
        self.pipeline = pipeline if pipeline is not None and pipeline.pipelined else None
        self.device_objs = as_devices(devices)
        self.devices = [d.name for d in self.device_objs]
        self.protocol = protocol
        if training is not None and protocol.objective != "training":
            raise PlacerError("a training step's loss and optimizer were given to an inference protocol; "
                              "measure with MeasureProtocol(objective='training')")
        self.training = (training or TrainingSpec()) if protocol.objective == "training" else None
        self._generated = [n for n in generated_inputs(graph) if n not in (feeds or {})]
        self.inputs = {**step_feeds(graph, seed), **(feeds or {})}   # every step's, as numpy arrays
        self.engine = make_engine(engine, graph, self.device_objs, self.inputs, prepared=prepared,
                                  training=self.training, pipeline=self.pipeline, timeout_s=protocol.timeout_s)

    @property
    def prepared(self) -> PreparedGraph | None:
        """The graph as the engine prepared it (constants folded), for a profile to reuse."""
        return self.engine.prepared

    def protocol_record(self) -> dict:
        """What every measurement records of how it was measured: the protocol, the devices, the
        engine, the training step's loss and optimizer, the micro-batches."""
        record = {**self.protocol.to_dict(), "devices": [str(d) for d in self.device_objs], **self.engine.record()}
        if self.training is not None:
            record.update(self.training.to_dict())
        if self.pipeline is not None:
            record.update(self.pipeline.to_dict())
        return record

    def run_record(self) -> dict:
        """How a step is run, for placements timed in interleaved rounds (the rounds record the rest)."""
        return {k: v for k, v in self.protocol_record().items() if k not in ("warmup", "repeats")}

    def open(self, placement: Placement) -> PlacedRun:
        """Build `placement` once in the engine, ready to be stepped; raises PlacerError (an
        invalid placement) or ExecutionFailure (e.g. over a memory cap)."""
        return self.engine.open(placement)

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
            failed = failed_measurement(exc, record, run.peak_memory)
            if failed.failure == KERNEL_ERROR:   # a kernel failing on generated values: say so
                failed.reason += generated_note(self._generated)
            return failed
        finally:
            run.close()


def measurer_for(engine: str, graph: OpGraph, devices: Sequence[Device | str],
                 protocol: MeasureProtocol = MeasureProtocol(), feeds: dict[str, np.ndarray] | None = None,
                 seed: int = 0, prepared: PreparedGraph | None = None, training=None, pipeline=None) -> RealMeasurer:
    """The real measurer of `engine` ("torch" or "onnxruntime"); the onnxruntime engine refuses
    the training objective in one line."""
    return RealMeasurer(graph, devices, protocol, feeds=feeds, seed=seed, prepared=prepared, training=training,
                        pipeline=pipeline, engine=engine)


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
