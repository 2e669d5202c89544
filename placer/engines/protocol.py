"""The `Engine` protocol: what measuring and the cost model know of an engine.

An engine runs placements of one graph on one device set, on inputs fixed when it is made (as a
deployed loop feeds the same buffers). `open(placement)` builds the placement once (parameters
loaded, sessions made, memory accounted and caps refused) and gives a `PlacedRun` to step many
times. placer's torch executor (`placer.engines.torch`) and ONNX Runtime
(`placer.engines.onnxruntime`) are the two engines; the measurers, the rounds and the profiler
hold one without knowing which.
"""

from __future__ import annotations

from typing import Any, Protocol

from placer.devices import Device
from placer.placement import Placement


class PlacedRun(Protocol):
    """One placement made ready to run, then stepped many times. `step` and `traced_step` raise
    `placer.engines.failures.ExecutionFailure` when the step cannot complete."""

    def step(self) -> float:
        """One step on the engine's inputs; its seconds."""

    def traced_step(self) -> None:
        """One step with every node timed (the tracing costs time: time steps with `step`)."""

    def node_times(self) -> list[dict[str, float]]:
        """Node -> seconds, for each traced step so far. An engine whose tracer is read once at
        the end (ONNX Runtime's) ends tracing here: read it after the last traced step."""

    @property
    def peak_memory(self) -> dict[str, int]:
        """Device -> peak bytes: measured where the device can say (CUDA), else accounted."""

    def close(self) -> None:
        """Release the placement's threads, sessions and memory."""


class Engine(Protocol):
    """Runs placements of one graph on `devices`; see the module doc."""

    name: str                   # "torch", "onnxruntime"
    devices: list[Device]
    live_node_times: bool       # whether `node_times` can be read after every traced step
    folded_nodes: set[str]      # nodes computed once per graph, not per step: they cost nothing
    prepared: Any               # the graph prepared for placer's kernels (constants folded), or None: reused by
                                # a profile of the same graph instead of preparing it again

    def open(self, placement: Placement) -> PlacedRun:
        """Build `placement` once; an invalid placement is a `PlacerError`, a placement over a
        memory cap an `OutOfMemory`."""

    def record(self) -> dict[str, Any]:
        """What a measurement records of the engine (beyond the protocol and the devices)."""

    def control_flow(self, since: dict | None = None) -> dict[str, dict[str, int]]:
        """Node -> what its If/Loop/Scan did in the steps run (the branch taken, the iterations)
        after `since` (an earlier answer); {} for an engine that cannot see inside its nodes."""
