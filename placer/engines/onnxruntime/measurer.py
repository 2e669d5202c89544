"""`OrtMeasurer`: the step time of a placement run in ONNX Runtime; `RealMeasurer`'s interface.

It plugs in wherever `placer.measure.measurer.RealMeasurer` does: same constructor, `devices`,
`protocol_record()`, `open(placement) -> PlacementRun` (for interleaved rounds) and
`measure(placement) -> Measurement` (warm-ups, then the median and IQR of the timed runs; a
failure is a failed `Measurement`, never an exception).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from placer.devices import Device, as_devices
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.measure.measurer import ExecutorRun, MeasureProtocol, RealMeasurer, random_feeds
from placer.program.pipeline import Pipeline
from placer.kernels.prepare import PreparedGraph, check_feeds
from placer.placement import Placement
from placer.engines.onnxruntime.placed import Folding, OrtPlacement

ENGINE = "onnxruntime"
TRAINING_REFUSED = "the training objective runs on the torch engine; drop --engine onnxruntime"


def check_objective(objective: str) -> None:
    """The onnxruntime engine runs forward passes only: a training step is a `PlacerError`."""
    if objective == "training":
        raise PlacerError(TRAINING_REFUSED)


class OrtMeasurer:
    """Measures placements of `graph` on `devices` in ONNX Runtime (a `Measurer`). `feeds` may
    override some inputs; the rest are random from `seed`, as `RealMeasurer`'s. With `pipeline`,
    a step is a pipelined step of its micro-batches, each fed the same inputs."""

    def __init__(self, graph: OpGraph, devices: Sequence[Device | str],
                 protocol: MeasureProtocol = MeasureProtocol(),
                 feeds: dict[str, np.ndarray] | None = None, seed: int = 0,
                 prepared: PreparedGraph | None = None, pipeline: Pipeline | None = None) -> None:
        check_objective(protocol.objective)
        self.graph = graph
        self.pipeline = pipeline if pipeline is not None and pipeline.pipelined else None
        self.device_objs = as_devices(devices)
        self.devices = [d.name for d in self.device_objs]
        self.protocol = protocol
        self.folding = Folding.of(graph, prepared)
        given = check_feeds(graph, {**random_feeds(graph, seed), **(feeds or {})})
        # made once: every step hands ORT the same OrtValues, as a deployed loop would
        self.feeds = {k: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v.numpy())) for k, v in given.items()}

    def protocol_record(self) -> dict:
        """What every measurement records of how it was measured: the protocol, the devices, the
        engine, the micro-batches."""
        return {**self.protocol.to_dict(), "devices": [str(d) for d in self.device_objs],
                "engine": ENGINE, "onnxruntime": ort.__version__,
                **(self.pipeline.to_dict() if self.pipeline is not None else {})}

    def open(self, placement: Placement) -> ExecutorRun:
        """Build `placement`'s sessions once, ready to be stepped (a `PlacementRun`); raises
        PlacerError (an invalid placement) or ExecutionFailure (e.g. over a memory cap)."""
        return ExecutorRun(OrtPlacement(self.graph, placement, self.device_objs, folding=self.folding,
                                        pipeline=self.pipeline), self.feeds, self.protocol.timeout_s)

    # the torch engine's warm-ups, statistics and failed measurements, over this engine's runs
    measure = RealMeasurer.measure
    run_record = RealMeasurer.run_record


ENGINES = ("torch", ENGINE)


def measurer_for(engine: str, graph: OpGraph, devices: Sequence[Device | str],
                 protocol: MeasureProtocol = MeasureProtocol(), feeds: dict[str, np.ndarray] | None = None,
                 seed: int = 0, prepared: PreparedGraph | None = None, training=None, pipeline=None):
    """The measurer of `engine` ("torch": `RealMeasurer`, "onnxruntime": `OrtMeasurer`); the
    onnxruntime engine refuses the training objective in one line."""
    if engine not in ENGINES:
        raise PlacerError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if engine == ENGINE:
        return OrtMeasurer(graph, devices, protocol, feeds=feeds, seed=seed, prepared=prepared, pipeline=pipeline)
    return RealMeasurer(graph, devices, protocol, feeds=feeds, seed=seed, prepared=prepared, training=training,
                        pipeline=pipeline)
