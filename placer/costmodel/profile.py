"""Per-node profiling: the time of each op on each device and of transfers between devices.

This is the data a cost model and a simulator need (`placer.costmodel.protocol.CostModel`).
Identical devices (the same spec but for the index, e.g. `cpu:0[threads=1]` and `cpu:1[threads=1]`)
form a class that is profiled once, so that noise never shows up as a difference between them:
the whole graph runs alone (every op sees its real inputs and the device's threads) for several
rounds, interleaved across the class's members so that a burst of load does not land on one of
them only, and the median per node is kept. Each round also runs the graph once without timing its
nodes: the whole-graph step is the median of those (timing every node costs time of its own, 15%
of rnnlm's step of 666 small nodes), and the simulator spreads the difference over the nodes
(`placer.costmodel.profiled`). Rounds go on past the protocol's `repeats` until the
medians settle (`Settle`: the whole step's median and the sum of the per-node medians each move by
at most a tolerance over the last rounds) or a cap is hit; the profile records how many rounds
each class took and whether it settled. Transfers are timed for a few sizes on a few pairs
of devices per (source class, destination class), fitted as ``latency + bytes / bandwidth``, and
the median fit is kept. Between virtual CPU devices nothing is copied (they share memory): the
cost is the hand-over between two worker threads, a latency with no bandwidth term.

With the training objective every step of a training step is timed the same way, under its
step name (`placer.engines.torch.backward`): each node's forward (with its autograd record),
``backward:<node>``, ``loss:<output>``, ``accumulate:<tensor>`` and ``update:<parameter>``.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from placer.devices import Device, as_devices
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.engines.torch.backward import training_prepared
from placer.engines.torch.executor import ExecutionFailure, PlacedExecutor, StepProfile, cpu_threads
from placer.kernels.control import observed
from placer.measure.measurer import MeasureProtocol, random_feeds
from placer.kernels.prepare import PreparedGraph, prepare
from placer.program.training import TrainingSpec
from placer.placement import Placement

log = logging.getLogger(__name__)

FORMAT = "placer.profile/1"
TRANSFER_SIZES = (4 * 2**10, 2**20, 16 * 2**20)
TRANSFER_PAIRS = 3   # device pairs timed per (source class, destination class)
PROFILE_PROTOCOL = MeasureProtocol(warmup=1, repeats=3)


@dataclass(frozen=True)
class Settle:
    """When a class's profile is stable: after at least the protocol's `repeats` rounds, the last
    `window` rounds moved the whole step's median and the sum of per-node medians by at most
    `tolerance` (a fraction) each; else stop at `max_rounds` or `max_seconds`, unsettled."""

    tolerance: float = 0.02
    window: int = 2
    max_rounds: int = 15
    max_seconds: float = 60.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PROFILE_SETTLE = Settle()


@dataclass
class TransferStat:
    """Moving a tensor from `src` to `dst`: ``latency_s + nbytes / bandwidth_Bps``."""

    src: str
    dst: str
    latency_s: float
    bandwidth_Bps: float | None   # None: no copy happens (virtual CPU devices share memory)

    def time(self, nbytes: int) -> float:
        """Predicted seconds to move `nbytes`."""
        return self.latency_s + (nbytes / self.bandwidth_Bps if self.bandwidth_Bps else 0.0)


@dataclass
class Profile:
    """Measured op times (step -> device -> seconds; inf where the step failed there), transfers,
    and how they were measured. Folded nodes (computed once per placement) cost 0. A step is a
    node, and for the training objective also a node's backward, a loss term, an accumulation
    or a parameter's update (`placer.engines.torch.backward` names them)."""

    devices: list[str]
    op_times: dict[str, dict[str, float]]
    transfers: list[TransferStat] = field(default_factory=list)
    folded_nodes: list[str] = field(default_factory=list)
    step_times: dict[str, float] = field(default_factory=dict)   # device -> whole graph alone (median)
    failures: dict[str, str] = field(default_factory=dict)       # device -> why it could not run the graph
    graph_sha256: str | None = None
    protocol: dict[str, Any] = field(default_factory=dict)
    # whole-graph measurements it was checked and calibrated against (`placer.costmodel.calibration`)
    calibration: dict[str, Any] = field(default_factory=dict)
    flag: str | None = None   # why its predictions are not to be trusted (off the measured steps), if so
    # control-flow node -> what the profiling inputs made it do ("then branch", "3 iterations" -> runs)
    control_flow: dict[str, dict[str, int]] = field(default_factory=dict)

    def op_time(self, node: str, device: str) -> float:
        """Seconds of step `node` on `device` (inf when unknown or failed)."""
        return self.op_times.get(node, {}).get(device, math.inf)

    @property
    def objective(self) -> str:
        """What a step was: "inference" (the forward pass) or "training" (forward, backward, update)."""
        return str(self.protocol.get("objective", "inference"))

    def transfer_time(self, nbytes: int, src: str, dst: str) -> float:
        """Seconds to move `nbytes` from `src` to `dst` (0 on the same device)."""
        if src == dst:
            return 0.0
        for t in self.transfers:
            if t.src == src and t.dst == dst:
                return t.time(nbytes)
        return math.inf

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (inf written as null)."""
        return {"format": FORMAT, "graph": {"sha256": self.graph_sha256}, "devices": list(self.devices),
                "op_times": {n: {d: (None if math.isinf(t) else t) for d, t in per.items()}
                             for n, per in self.op_times.items()},
                "transfers": [asdict(t) for t in self.transfers], "folded_nodes": list(self.folded_nodes),
                "step_times": dict(self.step_times), "failures": dict(self.failures),
                "protocol": dict(self.protocol), "calibration": dict(self.calibration), "flag": self.flag,
                "control_flow": dict(self.control_flow)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Profile:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PlacerError(f"not a profile: expected \"format\": \"{FORMAT}\"; write one with placer measure --profile")
        return cls(devices=list(data["devices"]),
                   op_times={n: {d: (math.inf if t is None else float(t)) for d, t in per.items()}
                             for n, per in data["op_times"].items()},
                   transfers=[TransferStat(**t) for t in data.get("transfers", [])],
                   folded_nodes=list(data.get("folded_nodes", [])),
                   step_times=dict(data.get("step_times", {})), failures=dict(data.get("failures", {})),
                   graph_sha256=(data.get("graph") or {}).get("sha256"), protocol=dict(data.get("protocol", {})),
                   calibration=dict(data.get("calibration") or {}), flag=data.get("flag"),
                   control_flow=dict(data.get("control_flow") or {}))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        path = Path(path)
        if not path.is_file():
            raise PlacerError(f"profile file {path} does not exist; write one with placer measure --profile")
        return cls.from_dict(json.loads(path.read_text()))


def profile_graph(graph: OpGraph, devices: Sequence[Device | str],
                  protocol: MeasureProtocol = PROFILE_PROTOCOL,
                  feeds: dict[str, np.ndarray] | None = None, seed: int = 0,
                  prepared: PreparedGraph | None = None,
                  transfer_sizes: tuple[int, ...] = TRANSFER_SIZES,
                  training: TrainingSpec | None = None, settle: Settle | None = PROFILE_SETTLE) -> Profile:
    """Time every step on each class of identical devices, and transfers between the classes;
    every member of a class gets the class's figures. Rounds go on until `settle` says the
    medians are stable (None: exactly the protocol's `repeats`). With the protocol's objective "training"
    the steps are those of a training step with `training`'s loss and optimizer (default:
    `TrainingSpec()`)."""
    if training is not None and protocol.objective != "training":
        raise PlacerError("a training step's loss and optimizer were given to an inference protocol; "
                          "profile with MeasureProtocol(objective='training')")
    if protocol.objective == "training":
        training = training or TrainingSpec()
        prepared = training_prepared(graph, prepared)
    devs = as_devices(devices)
    prepared = prepared if prepared is not None else prepare(graph)
    before = observed(prepared.kernels)
    feeds = {**random_feeds(graph, seed), **(feeds or {})}
    classes = device_classes(devs)
    by_class, rounds = {}, {}
    for cls, members in _members(devs, classes).items():
        times, step, failure, rounds[cls] = _profile_class(graph, prepared, members, devs, feeds, protocol,
                                                           training, settle)
        by_class[cls] = times, step, failure
    # every step some class ran (a class that failed has no figures: its steps are inf there)
    steps = list(dict.fromkeys([*graph.nodes, *(s for times, _, _ in by_class.values() for s in times)]))
    op_times: dict[str, dict[str, float]] = {s: {} for s in steps}
    step_times: dict[str, float] = {}
    failures: dict[str, str] = {}
    for dev in devs:
        times, step, failure = by_class[classes[dev.name]]
        for s in steps:
            op_times[s][dev.name] = 0.0 if s in prepared.folded else times.get(s, math.inf)
        if failure:
            failures[dev.name] = failure
        else:
            step_times[dev.name] = step
    for node in prepared.folded_nodes:
        op_times[node] = {d.name: 0.0 for d in devs}
    record = {**protocol.to_dict(), "devices": [str(d) for d in devs], "classes": classes,
              "transfer_sizes": list(transfer_sizes), "settle": settle.to_dict() if settle else None,
              "rounds": rounds}
    if training is not None:
        record.update(training.to_dict())
    return Profile(devices=[d.name for d in devs], op_times=op_times,
                   transfers=_class_transfers(devs, classes, transfer_sizes),
                   folded_nodes=list(prepared.folded_nodes), step_times=step_times, failures=failures,
                   graph_sha256=graph.sha256, protocol=record, control_flow=observed(prepared.kernels, since=before))


def device_class(dev: Device, devices: list[Device]) -> str:
    """What makes devices identical for profiling: the spec without the index, with the threads a
    CPU device really runs with (its share of the cores by default) and the model of a GPU."""
    if dev.kind == "cpu":
        return str(replace(dev, index=None, threads=cpu_threads(dev, devices)))
    return f"{replace(dev, index=None)} {torch.cuda.get_device_name(dev.index)}"


def device_classes(devices: list[Device]) -> dict[str, str]:
    """Device name -> its class (`device_class`)."""
    return {d.name: device_class(d, devices) for d in devices}


def _members(devs: list[Device], classes: dict[str, str]) -> dict[str, list[Device]]:
    """Class -> its devices, in the order given."""
    members: dict[str, list[Device]] = {}
    for d in devs:
        members.setdefault(classes[d.name], []).append(d)
    return members


def _profile_class(graph: OpGraph, prepared: PreparedGraph, members: list[Device], devs: list[Device],
                   feeds: dict[str, np.ndarray], protocol: MeasureProtocol, training: TrainingSpec | None,
                   settle: Settle | None) -> tuple[dict[str, float], float, str | None, dict[str, Any]]:
    """Per-step and whole-step medians of the class, each timed round on the next member in turn,
    until they settle; and how many rounds that took."""
    used = members[:protocol.repeats]   # a member that would get no timed round is not started
    samples: dict[str, list[float]] = {}
    steps: list[float] = []
    figures: list[tuple[float, float]] = []   # (whole-step median, sum of node medians) after each round
    try:
        with ExitStack() as stack:
            executors = [stack.enter_context(PlacedExecutor(graph, _alone(graph, d, devs), devs,
                                                            prepared=prepared, training=training))
                         for d in used]
            for executor in executors:
                for _ in range(protocol.warmup):
                    _timed_run(executor, feeds, protocol)
            start = time.perf_counter()
            i = 0
            while i < protocol.repeats or (settle is not None and not _settled(figures, settle)
                                           and i < settle.max_rounds
                                           and time.perf_counter() - start < settle.max_seconds):
                executor = executors[i % len(executors)]
                _, node_times = _timed_run(executor, feeds, protocol)
                steps.append(_timed_run(executor, feeds, protocol, instrumented=False)[0])
                for node, t in node_times.items():
                    samples.setdefault(node, []).append(t)
                figures.append((statistics.median(steps), sum(statistics.median(v) for v in samples.values())))
                i += 1
    except ExecutionFailure as exc:
        log.info("profiling on %s failed (%s): %s", [d.name for d in used], exc.failure, exc)
        return {}, math.inf, f"{exc.failure}: {exc}", {"rounds": len(steps), "settled": False}
    settled = settle is None or _settled(figures, settle)
    if not settled:
        log.info("the profile on %s did not settle within %d rounds", [d.name for d in used], len(steps))
    return ({n: statistics.median(v) for n, v in samples.items()}, statistics.median(steps), None,
            {"rounds": len(steps), "settled": settled})


def _settled(figures: list[tuple[float, float]], settle: Settle) -> bool:
    """The last `settle.window` rounds moved each figure by at most `settle.tolerance`."""
    if len(figures) <= settle.window:
        return False
    now, before = figures[-1], figures[-1 - settle.window]
    return all(b > 0 and abs(a / b - 1.0) <= settle.tolerance for a, b in zip(now, before))


def _timed_run(executor: PlacedExecutor, feeds: dict[str, np.ndarray], protocol: MeasureProtocol,
               instrumented: bool = True) -> tuple[float, dict[str, float]]:
    """One profiled step (warm-ups too, so that they warm up the same path): seconds, node -> seconds.
    Not `instrumented`: the whole step alone, as a placement runs (timing each node costs time too)."""
    prof = StepProfile() if instrumented else None
    start = time.perf_counter()
    executor.run(feeds, timeout_s=protocol.timeout_s, profile=prof)
    return time.perf_counter() - start, prof.node_times if prof is not None else {}


def _alone(graph: OpGraph, dev: Device, devs: list[Device]) -> Placement:
    """Every node on `dev`."""
    return Placement.single_device(list(graph.nodes), dev.name, graph.sha256, devices=[d.name for d in devs])


def _class_transfers(devs: list[Device], classes: dict[str, str], sizes: tuple[int, ...]) -> list[TransferStat]:
    """One fit per (source class, destination class): the median of a few pairs' fits."""
    pairs: dict[tuple[str, str], list[tuple[Device, Device]]] = {}
    for a in devs:
        for b in devs:
            if a.name != b.name:
                pairs.setdefault((classes[a.name], classes[b.name]), []).append((a, b))
    fits = {key: _median_fit([measure_transfer(a, b, sizes) for a, b in some[:TRANSFER_PAIRS]])
            for key, some in pairs.items()}
    return spread_transfers([d.name for d in devs], classes, fits)


def _median_fit(stats: list[TransferStat]) -> TransferStat:
    """The fit whose 1 MiB copy time is the median (the lower one of an even count)."""
    return sorted(stats, key=lambda t: t.time(2**20))[(len(stats) - 1) // 2]


def spread_transfers(names: list[str], classes: dict[str, str],
                     fits: dict[tuple[str, str], TransferStat]) -> list[TransferStat]:
    """A copy of its class pair's fit for every ordered pair of `names` (KeyError if one is missing)."""
    return [replace(fits[classes[a], classes[b]], src=a, dst=b) for a in names for b in names if a != b]


def measure_transfer(src: Device, dst: Device, sizes: tuple[int, ...] = TRANSFER_SIZES,
                     repeats: int = 5) -> TransferStat:
    """Time moving tensors from `src` to `dst` the way the executor does, and fit the line."""
    if src.kind == "cpu" and dst.kind == "cpu":
        return TransferStat(src.name, dst.name, _handover_latency(repeats * 20), None)
    xs, ys = [], []
    for nbytes in sizes:
        x = torch.empty(nbytes // 4, dtype=torch.float32, device=src.torch_device)
        if src.kind == "cpu":
            x = x.pin_memory()
        for i in range(repeats + 1):
            _sync(src, dst)
            start = time.perf_counter()
            x.to(dst.torch_device, non_blocking=True)
            _sync(src, dst)
            if i:   # the first copy pays one-time setup
                xs.append(nbytes)
                ys.append(time.perf_counter() - start)
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    bandwidth = 1.0 / slope if slope > 0 else None
    return TransferStat(src.name, dst.name, max(float(intercept), 0.0), bandwidth)


def _sync(*devices: Device) -> None:
    for d in devices:
        if d.kind == "cuda":
            torch.cuda.synchronize(d.torch_device)


def _handover_latency(rounds: int) -> float:
    """Half the round trip of two threads waking each other with `threading.Event`s, as the
    executor's workers hand a tensor over."""
    ping, pong = threading.Event(), threading.Event()

    def echo() -> None:
        for _ in range(rounds):
            ping.wait()
            ping.clear()
            pong.set()

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    start = time.perf_counter()
    for _ in range(rounds):
        ping.set()
        pong.wait()
        pong.clear()
    elapsed = time.perf_counter() - start
    thread.join()
    return elapsed / rounds / 2
