"""The onnxruntime engine: a placement as ONNX Runtime sessions per device partition
(`OrtPlacement`) behind the `Engine` protocol. It runs forward passes only."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnxruntime as ort

from placer.devices import Device
from placer.engines.onnxruntime.placed import Folding, OrtPlacement
from placer.engines.onnxruntime.trace import node_records, node_seconds
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.kernels.prepare import PreparedGraph, check_feeds
from placer.placement import Placement
from placer.program.pipeline import Pipeline

NAME = "onnxruntime"


class OrtEngine:
    """Placements of `graph` run in ONNX Runtime, one thread per device running its sessions.
    With `pipeline`, a step is a pipelined step of its micro-batches, each fed the same inputs."""

    name = NAME
    live_node_times = False   # ORT's profiler is written out once, when it ends

    def __init__(self, graph: OpGraph, devices: Sequence[Device], inputs: Mapping[str, np.ndarray], *,
                 prepared: PreparedGraph | None = None, pipeline: Pipeline | None = None,
                 timeout_s: float = 60.0) -> None:
        self.graph, self.devices, self.timeout_s = graph, list(devices), timeout_s
        self.pipeline = pipeline if pipeline is not None and pipeline.pipelined else None
        self.prepared = prepared
        self.folding = Folding.of(graph, prepared)
        self.folded_nodes = set(self.folding.nodes)
        given = check_feeds(graph, dict(inputs))
        # made once: every step hands ORT the same OrtValues, as a deployed loop would
        self.feeds = {k: ort.OrtValue.ortvalue_from_numpy(np.asarray(v.numpy(), order="C")) for k, v in given.items()}

    def open(self, placement: Placement) -> OrtRun:
        return OrtRun(self, placement)

    def build(self, placement: Placement, profile_prefix: str | None = None) -> OrtPlacement:
        return OrtPlacement(self.graph, placement, self.devices, folding=self.folding, pipeline=self.pipeline,
                            profile_prefix=profile_prefix)

    def record(self) -> dict[str, Any]:
        return {"engine": NAME, "onnxruntime": ort.__version__}

    def control_flow(self, since: dict | None = None) -> dict[str, dict[str, int]]:
        return {}   # ORT runs an If or a Loop inside its kernel: nothing to see from here


class OrtRun:
    """A `PlacedRun` of ONNX Runtime sessions. Traced steps run a second set of the placement's
    sessions with ORT's profiler on, made on the first traced step; `node_times` ends it."""

    def __init__(self, engine: OrtEngine, placement: Placement) -> None:
        self.engine, self.placement = engine, placement
        self.placed = engine.build(placement)
        self._traced: OrtPlacement | None = None
        self._folder: str | None = None
        self._node_times: list[dict[str, float]] | None = None

    def step(self) -> float:
        start = time.perf_counter()
        self.placed.run(self.engine.feeds, self.engine.timeout_s)
        return time.perf_counter() - start

    def traced_step(self) -> None:
        if self._node_times is not None:
            raise PlacerError("ONNX Runtime's profiler has been read: open the placement again to trace more steps")
        if self._traced is None:
            self._folder = tempfile.mkdtemp(prefix="placer-ort-profile-")
            self._traced = self.engine.build(self.placement, os.path.join(self._folder, "trace"))
        self._traced.run(self.engine.feeds, self.engine.timeout_s)

    def node_times(self) -> list[dict[str, float]]:
        if self._node_times is None:
            self._node_times = []
            if self._traced is not None:
                for piece in self._traced.engine.pieces:
                    runs = node_records(piece.session.end_profiling())
                    if not self._node_times:
                        # a node with no record of its own ran inside another's (fused) or was folded: 0 s
                        self._node_times = [dict.fromkeys(self.engine.graph.nodes, 0.0) for _ in runs]
                    for merged, run in zip(self._node_times, runs):
                        for node, seconds in node_seconds(self.engine.graph, run).items():
                            merged[node] = merged.get(node, 0.0) + seconds
        return list(self._node_times)

    @property
    def peak_memory(self) -> dict[str, int]:
        return self.placed.peak_memory

    def close(self) -> None:
        self.placed.close()
        if self._traced is not None:
            self._traced.close()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
