"""`OrtPlacement`: a placement of an `OpGraph` made ready to run in ONNX Runtime, built once.

The placement becomes partitions (`placer.engines.onnxruntime.partition`), each an `InferenceSession` on its
device, run by `ConcurrentSessions`. Every node on one device is the plain case: one session of
the whole bound model, nothing cut, nothing folded, as a user would run it. Peak memory per device
is accounted before anything is built, as placer's torch engine does (`placer.program.memory`):
the constants each of the device's sessions holds (a session keeps its own copy) plus the largest
set of live tensors under the device's schedule; a device over its cap is `OutOfMemory` at once.
A pipelined step (`pipeline`) runs the same sessions on each of its micro-batches, and the live
tensors are those of the micro-batches in flight, accounted as the torch engine does: its program
unrolled over the micro-batches, each device in micro-batch order (`placer.program.pipeline`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import onnxruntime as ort

from placer.devices import Device, as_devices
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.graph.placement_check import assignment as checked_assignment
from placer.engines.failures import OutOfMemory
from placer.engines.affinity import threads_and_cores
from placer.program.memory import predict_peak_memory
from placer.program.pipeline import Pipeline, per_micro_batch, placed
from placer.kernels.prepare import PreparedGraph, prepare
from placer.program.schedule import build_schedule
from placer.program.walk import Step
from placer.placement import Placement
from placer.engines.onnxruntime.concurrent import ConcurrentSessions, Piece
from placer.engines.onnxruntime.partition import partition_model, plan_partitions, value_types
from placer.engines.onnxruntime.sessions import build_session, session_options

log = logging.getLogger(__name__)


@dataclass
class Folding:
    """What placer computes once per graph (`placer.kernels.prepare`): folded tensors as arrays."""

    values: dict[str, np.ndarray] = field(default_factory=dict)
    nodes: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, graph: OpGraph, prepared: PreparedGraph | None = None) -> Folding:
        """The graph's folded values; none where placer's kernels cannot bind the graph (ONNX
        Runtime then runs those nodes too)."""
        try:
            prepared = prepared if prepared is not None else prepare(graph)
        except PlacerError as exc:
            log.info("nothing folded for the onnxruntime engine: %s", exc)
            return cls()
        return cls({t: v.numpy() for t, v in prepared.folded.items()}, set(prepared.folded_nodes))


class OrtPlacement:
    """`graph` under `placement` on `devices` as ONNX Runtime sessions; `run(feeds)` is one step.

    `profile_prefix` turns ORT's profiler on in every session (files named from it); with
    `pipeline` a step is a pipelined step of its micro-batches; `stages` (node -> number; by
    default bands of depth; {}: none) cut the partitions further
    (`placer.engines.onnxruntime.partition`). A session holds its own copy of each weight it
    reads, so where the default stages' copies (a recurrence's weights, read at every step) put a
    device over its cap, the partitions stay uncut."""

    def __init__(self, graph: OpGraph, placement: Placement, devices: Sequence[Device | str] | None = None,
                 *, folding: Folding | None = None, profile_prefix: str | None = None,
                 pipeline: Pipeline | None = None, stages: Mapping[str, int] | None = None) -> None:
        self.graph = graph
        self.pipeline = pipeline if pipeline is not None and pipeline.pipelined else None
        self.devices = as_devices(devices if devices is not None else placement.devices)
        by_name = {d.name: d for d in self.devices}
        self.assignment = checked_assignment(graph, placement, list(by_name))
        used = list(dict.fromkeys(self.assignment.values()))
        whole = len(used) == 1
        self.folding = Folding() if whole else (folding if folding is not None else Folding.of(graph))
        cut = partial(plan_partitions, graph, self.assignment, self.folding.values, self.folding.nodes)
        self.partitions = cut({} if whole else stages)   # one device: one session of the whole model
        self.peak_memory = self._accounted()
        over = self._over_cap()
        if over and stages is None and not whole:
            self.partitions = cut({})
            self.peak_memory = self._accounted()
            over = self._over_cap()
        if over:
            raise OutOfMemory("; ".join(f"{d.name} needs about {self.peak_memory[d.name]} B but its cap is "
                                        f"{d.mem_cap} B" for d in over), peak_memory=dict(self.peak_memory))
        # A pool that spins after its run holds a core the device's next session, or another device,
        # needs (Inception-v3 on two 2-thread devices of a 2-core machine: a step twice as long with
        # spinning): only the plain single session keeps ORT's default.
        spinning = whole
        types = value_types(graph) if not whole else {}
        threads, cores = threads_and_cores(self.devices)   # the torch engine's: each virtual CPU device its own cores
        pieces = []
        for part in self.partitions:
            device = by_name[part.device]
            model = graph.model if whole else partition_model(graph, part, self.folding.values, types)
            options = session_options(device, threads[device.name] or 1, spinning=spinning,
                                      cores=cores.get(device.name, frozenset()),
                                      profile_prefix=profile_prefix and f"{profile_prefix}_part{part.index}")
            inputs = [i.name for i in graph.inputs] if whole else part.inputs
            outputs = [o.name for o in graph.outputs] if whole else part.outputs
            pieces.append(Piece(f"partition {part.index}", device, build_session(model, device, options),
                                inputs, outputs))
        made = {t for p in pieces for t in p.outputs}
        direct = {o.name: self._constant(o.name) for o in graph.outputs
                  if o.name not in made and o.name not in {i.name for i in graph.inputs}}
        self.engine = ConcurrentSessions(pieces, [o.name for o in graph.outputs], direct, cores)

    def _over_cap(self) -> list[Device]:
        return [d for d in self.devices if d.mem_cap is not None and self.peak_memory.get(d.name, 0) > d.mem_cap]

    def _constant(self, name: str) -> np.ndarray:
        if name in self.folding.values:
            return self.folding.values[name]
        return self.graph.initializer_array(name)

    def run(self, feeds: Mapping[str, ort.OrtValue | np.ndarray] | Sequence[Mapping], timeout_s: float | None = None
            ) -> dict[str, ort.OrtValue]:
        """One step on `feeds` (every graph input): output name -> `OrtValue`. Pipelined, `feeds`
        is one mapping per micro-batch (or one for all of them) and micro-batch k's outputs are
        named ``<output>#k``."""
        per = per_micro_batch(feeds, self.pipeline.micro_batches if self.pipeline is not None else 1)
        return self.engine.run(per if self.pipeline is not None else per[0], timeout_s)

    def run_arrays(self, feeds: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]],
                   timeout_s: float | None = None) -> dict[str, np.ndarray]:
        """`run`, with the outputs as numpy arrays."""
        return {k: v.numpy() for k, v in self.run(feeds, timeout_s).items()}

    def _accounted(self) -> dict[str, int]:
        """Bytes per device: its sessions' constants plus the peak of live tensors."""
        graph, folded = self.graph, self.folding.values
        names: dict[str, str] = {}   # a micro-batch's tensor -> its tensor in the model

        def size(t: str) -> int:
            t = names.get(t, t)
            if t in folded:
                return int(folded[t].nbytes)
            info = graph.tensors.get(t)
            return info.nbytes if info is not None else 0

        steps = [Step(n, graph.nodes[n].op_type, graph.nodes[n].inputs + graph.nodes[n].implicit_inputs,
                      graph.nodes[n].outputs) for p in self.partitions for n in p.nodes]
        steps.sort(key=_position(graph))
        consts = set(graph.initializers) | set(folded)
        devices = [d.name for d in self.devices]
        where, feeds, outputs = self.assignment, {i.name for i in graph.inputs}, [o.name for o in graph.outputs]
        if self.pipeline is not None:
            steps, where, unrolled = placed(steps, where, outputs, consts, self.pipeline, devices)
            names, outputs = unrolled.names, unrolled.outputs
            feeds = feeds | {new for new, old in names.items() if old in feeds}
        schedule = build_schedule(steps, where, devices, consts, feeds, outputs)
        live = {d: m.peak - m.resident for d, m in predict_peak_memory(schedule, size).items()}
        held = {d.name: 0 for d in self.devices}
        for part in self.partitions:
            held[part.device] += sum(size(t) for t in part.constants)
        return {d: held[d] + live.get(d, 0) for d in held}

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> OrtPlacement:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _position(graph: OpGraph):
    order = {n: i for i, n in enumerate(graph.nodes)}
    return lambda step: order[step.name]
