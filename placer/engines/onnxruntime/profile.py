"""Per-node profiles from ONNX Runtime: each node's time on each device as ORT runs it.

The same `placer.costmodel.profile.Profile` placer's torch profiler writes, so the simulator, the
lower bound, the placers and the learner read it alike. Each class of identical devices runs the
whole model in one session (the engine's single-device case) with ORT's profiler on; its "Node"
records give each kernel's duration. ORT renames what it rewrites: a node it converts to the
blocked layout is named after its output (``<tensor>_nchwc``), and a fusion after its last output
(Conv+Relu is the Relu's output with op Conv), so a record is matched to the node that makes its
output, then back along the first input to the node of the op ORT ran. Nodes ORT fused away or
folded get 0; layout reorders ORT inserts match no node, and like the engine's own per-session
cost they are in the gap between the step time (a session without the profiler, measured in the
same rounds) and the sum of the node times, which the profiled cost model spreads over the nodes.
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from placer.devices import Device, as_devices
from placer.graph.opgraph import OpGraph
from placer.engines.torch.executor import ExecutionFailure
from placer.measure.measurer import MeasureProtocol
from placer.kernels.prepare import PreparedGraph
from placer.costmodel.profile import (PROFILE_PROTOCOL, TRANSFER_SIZES, Profile, device_classes, measure_transfer,
                                    spread_transfers)
from placer.placement import Placement
from placer.engines.onnxruntime.measurer import ENGINE, OrtMeasurer
from placer.engines.onnxruntime.placed import OrtPlacement

log = logging.getLogger(__name__)

# How far back along first inputs a fused record looks for the node of the op ORT ran.
_FUSED_DEPTH = 4


def profile_graph_ort(graph: OpGraph, devices: Sequence[Device | str], protocol: MeasureProtocol = PROFILE_PROTOCOL,
                      feeds: dict[str, np.ndarray] | None = None, seed: int = 0,
                      prepared: PreparedGraph | None = None,
                      transfer_sizes: tuple[int, ...] = TRANSFER_SIZES) -> Profile:
    """Time every node in ONNX Runtime on each class of identical devices (`placer.costmodel.profile`'s
    classes; every member gets its class's figures), and the hand-overs between the classes."""
    devs = as_devices(devices)
    measurer = OrtMeasurer(graph, devs, protocol, feeds=feeds, seed=seed, prepared=prepared)
    classes = device_classes(devs)
    members: dict[str, list[Device]] = {}
    for d in devs:
        members.setdefault(classes[d.name], []).append(d)
    by_class = {c: _profile_class(graph, measurer, ms) for c, ms in members.items()}
    folded = measurer.folding.nodes
    op_times = {n: {} for n in graph.nodes}
    step_times, failures = {}, {}
    for d in devs:
        times, step, failure = by_class[classes[d.name]]
        for n in graph.nodes:
            op_times[n][d.name] = 0.0 if n in folded else (math.inf if failure else times.get(n, 0.0))
        if failure:
            failures[d.name] = failure
        else:
            step_times[d.name] = step
    fits = {}
    for a in devs:
        for b in devs:
            if a.name != b.name and (classes[a.name], classes[b.name]) not in fits:
                fits[classes[a.name], classes[b.name]] = measure_transfer(a, b, transfer_sizes)
    record = {**measurer.protocol_record(), "classes": classes, "transfer_sizes": list(transfer_sizes)}
    return Profile(devices=[d.name for d in devs], op_times=op_times,
                   transfers=spread_transfers([d.name for d in devs], classes, fits),
                   folded_nodes=sorted(folded), step_times=step_times, failures=failures,
                   graph_sha256=graph.sha256, protocol={**record, "engine": ENGINE})


def _profile_class(graph: OpGraph, measurer: OrtMeasurer, members: list[Device]
                   ) -> tuple[dict[str, float], float, str | None]:
    """Node -> median seconds and the median step of the class, each round on the next member:
    a profiled session for the node times, a plain one for the step."""
    protocol = measurer.protocol
    used = members[:protocol.repeats]
    folder = tempfile.mkdtemp(prefix="placer-ort-profile-")
    steps: list[float] = []
    try:
        with ExitStack() as stack:
            pairs = []
            for d in used:
                alone = Placement.single_device(list(graph.nodes), d.name, graph.sha256, devices=measurer.devices)
                plain = stack.enter_context(OrtPlacement(graph, alone, measurer.device_objs))
                traced = stack.enter_context(OrtPlacement(graph, alone, measurer.device_objs,
                                                          profile_prefix=os.path.join(folder, d.name.replace(":", "_"))))
                pairs.append((plain, traced))
            for plain, traced in pairs:
                for _ in range(protocol.warmup):
                    plain.run(measurer.feeds, protocol.timeout_s)
                    traced.run(measurer.feeds, protocol.timeout_s)
            for i in range(protocol.repeats):
                plain, traced = pairs[i % len(pairs)]
                steps.append(_timed(plain, measurer.feeds, protocol.timeout_s))
                traced.run(measurer.feeds, protocol.timeout_s)
            runs = [run for _, traced in pairs
                    for run in node_records(traced.engine.pieces[0].session.end_profiling())[protocol.warmup:]]
    except ExecutionFailure as exc:
        log.info("profiling on %s failed (%s): %s", [d.name for d in used], exc.failure, exc)
        return {}, math.inf, f"{exc.failure}: {exc}"
    finally:
        for f in Path(folder).glob("*"):
            f.unlink()
        os.rmdir(folder)
    per_run = [_by_node(graph, run) for run in runs]
    nodes = {n for run in per_run for n in run}
    return {n: statistics.median(run.get(n, 0.0) for run in per_run) for n in nodes}, statistics.median(steps), None


def _timed(placed: OrtPlacement, feeds, timeout_s: float) -> float:
    start = time.perf_counter()
    placed.run(feeds, timeout_s)
    return time.perf_counter() - start


def node_records(path: str) -> list[list[tuple[str, str, float]]]:
    """The kernel records of an ORT profile file, one list per run: (record name, op, seconds)."""
    events = json.loads(Path(path).read_text())
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    result: list[list[tuple[str, str, float]]] = [[] for _ in runs]
    starts = [s for s, _ in runs]
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        i = int(np.searchsorted(starts, e["ts"], side="right")) - 1
        if 0 <= i < len(runs) and e["ts"] <= runs[i][1]:
            name = e["name"][:-len("_kernel_time")]
            result[i].append((name, e.get("args", {}).get("op_name", ""), e["dur"] * 1e-6))
    return result


def _by_node(graph: OpGraph, records: list[tuple[str, str, float]]) -> dict[str, float]:
    """Seconds per placer node of one run (records that match no node are left out)."""
    times: dict[str, float] = {}
    for name, op, seconds in records:
        node = match_node(graph, name, op)
        if node is not None:
            times[node] = times.get(node, 0.0) + seconds
    return times


def match_node(graph: OpGraph, record: str, op: str) -> str | None:
    """The placer node an ORT kernel record stands for (see the module doc), or None."""
    if record in graph.nodes:
        node = record
    else:
        node = graph.producer.get(record.removesuffix("_nchwc"))
        if node is None:
            return None
    found = node
    for _ in range(_FUSED_DEPTH):
        if graph.nodes[found].op_type == op:
            return found
        first = next((t for t in graph.nodes[found].inputs if t), None)
        found = graph.producer.get(first)
        if found is None:
            break
    return node
