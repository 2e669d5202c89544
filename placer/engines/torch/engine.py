"""The torch engine: placer's own executor (`PlacedExecutor`) behind the `Engine` protocol."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from placer.devices import Device
from placer.engines.torch.executor import PlacedExecutor, StepProfile
from placer.graph.opgraph import OpGraph
from placer.kernels.control import observed
from placer.kernels.prepare import PreparedGraph, check_feeds, prepare, to_tensor, training_prepared
from placer.placement import Placement
from placer.program.pipeline import Pipeline
from placer.program.training import TrainingSpec

NAME = "torch"


class TorchEngine:
    """Placements of `graph` run by `PlacedExecutor`, one worker thread per device. With
    `training`, a step is a training step; with `pipeline`, a pipelined step of its micro-batches,
    each fed the same inputs."""

    name = NAME
    live_node_times = True

    def __init__(self, graph: OpGraph, devices: Sequence[Device], inputs: Mapping[str, np.ndarray], *,
                 prepared: PreparedGraph | None = None, training: TrainingSpec | None = None,
                 pipeline: Pipeline | None = None, timeout_s: float = 60.0) -> None:
        self.graph, self.devices, self.training, self.timeout_s = graph, list(devices), training, timeout_s
        self.pipeline = pipeline if pipeline is not None and pipeline.pipelined else None
        # the trained paths run every step: prepared once here, not per placement
        self.prepared = (training_prepared(graph, prepared) if training is not None
                         else prepared if prepared is not None else prepare(graph))
        self.folded_nodes = set(self.prepared.folded_nodes)
        tensors = check_feeds(graph, {k: to_tensor(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()})
        if any(d.kind == "cuda" for d in self.devices) and torch.cuda.is_available():
            tensors = {k: v.pin_memory() for k, v in tensors.items()}   # async host-to-device copies
        self.feeds = tensors

    def open(self, placement: Placement) -> TorchRun:
        executor = PlacedExecutor(self.graph, placement, self.devices, prepared=self.prepared,
                                  training=self.training, pipeline=self.pipeline)
        return TorchRun(executor, self.feeds, self.timeout_s)

    def record(self) -> dict[str, Any]:
        return {}   # the default engine: measurements have always been its own

    def control_flow(self, since: dict | None = None) -> dict[str, dict[str, int]]:
        return observed(self.prepared.kernels, since=since)


class TorchRun:
    """A `PlacedRun` of the executor: one step on fixed inputs, timed; traced steps time each node."""

    def __init__(self, executor: PlacedExecutor, feeds: dict, timeout_s: float) -> None:
        self.executor, self.feeds, self.timeout_s = executor, feeds, timeout_s
        self._traced: list[dict[str, float]] = []

    def step(self) -> float:
        start = time.perf_counter()
        self.executor.run(self.feeds, timeout_s=self.timeout_s)
        return time.perf_counter() - start

    def traced_step(self) -> None:
        profile = StepProfile()
        self.executor.run(self.feeds, timeout_s=self.timeout_s, profile=profile)
        self._traced.append(profile.node_times)

    def node_times(self) -> list[dict[str, float]]:
        return list(self._traced)

    @property
    def peak_memory(self) -> dict[str, int]:
        return self.executor.peak_memory

    def close(self) -> None:
        self.executor.close()
