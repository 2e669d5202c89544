"""The one profiler: each step's time on each device and each transfer's, measured in an engine.

It gives a `placer.costmodel.profile.Profile`, in either engine (`placer.engines`): the profiler opens
placements and steps them through the `Engine` protocol, and does not know which engine it holds.
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

An engine whose tracer is read once at the end (ONNX Runtime's) runs exactly the protocol's
`repeats`: its node medians cannot be watched settling. With the training objective every step of a training step is timed the same way, under its
step name (`placer.engines.torch.backward`): each node's forward (with its autograd record),
``backward:<node>``, ``loss:<output>``, ``accumulate:<tensor>`` and ``update:<parameter>``.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack, closing
from typing import Any

import numpy as np
import torch

from placer.costmodel.profile import (PROFILE_PROTOCOL, PROFILE_SETTLE, TRANSFER_PAIRS, TRANSFER_SIZES, Profile,
                                      Settle, TransferStat, _members, device_classes, spread_transfers)
from placer.devices import Device, as_devices
from placer.engines import make_engine
from placer.engines.failures import ExecutionFailure
from placer.engines.protocol import Engine
from placer.errors import PlacerError
from placer.graph.feeds import step_feeds
from placer.graph.opgraph import OpGraph
from placer.kernels.prepare import PreparedGraph
from placer.measure.measurer import MeasureProtocol
from placer.measure.progress import Progress
from placer.placement import Placement
from placer.program.training import TrainingSpec

log = logging.getLogger(__name__)


def profile_graph(graph: OpGraph, devices: Sequence[Device | str],
                  protocol: MeasureProtocol = PROFILE_PROTOCOL,
                  feeds: dict[str, np.ndarray] | None = None, seed: int = 0,
                  prepared: PreparedGraph | None = None,
                  transfer_sizes: tuple[int, ...] = TRANSFER_SIZES,
                  training: TrainingSpec | None = None, settle: Settle | None = PROFILE_SETTLE,
                  engine: str = "torch", progress: Progress | None = None) -> Profile:
    """Time every step on each class of identical devices in `engine`, and transfers between the
    classes; every member of a class gets the class's figures. Rounds go on until `settle` says
    the medians are stable (None: exactly the protocol's `repeats`). With the protocol's objective
    "training" the steps are those of a training step with `training`'s loss and optimizer
    (default: `TrainingSpec()`). `progress` hears of the rounds now and then."""
    if training is not None and protocol.objective != "training":
        raise PlacerError("a training step's loss and optimizer were given to an inference protocol; "
                          "profile with MeasureProtocol(objective='training')")
    if protocol.objective == "training":
        training = training or TrainingSpec()
    devs = as_devices(devices)
    # the graph's sample inputs (--inputs) decide each If's branch and Loop's iterations as they will in a step
    runner = make_engine(engine, graph, devs, {**step_feeds(graph, seed), **(feeds or {})}, prepared=prepared,
                         training=training, timeout_s=protocol.timeout_s)
    if not runner.live_node_times:
        settle = None
    before = runner.control_flow()
    classes = device_classes(devs)
    by_class, rounds = {}, {}
    for cls, members in _members(devs, classes).items():
        times, step, failure, rounds[cls] = _profile_class(graph, runner, members, devs, protocol, settle, progress)
        by_class[cls] = times, step, failure
    # every step some class ran (a class that failed has no figures: its steps are inf there)
    steps = list(dict.fromkeys([*graph.nodes, *(s for times, _, _ in by_class.values() for s in times)]))
    op_times: dict[str, dict[str, float]] = {s: {} for s in steps}
    step_times: dict[str, float] = {}
    failures: dict[str, str] = {}
    for dev in devs:
        times, step, failure = by_class[classes[dev.name]]
        for s in steps:
            op_times[s][dev.name] = 0.0 if s in runner.folded_nodes else times.get(s, math.inf)
        if failure:
            failures[dev.name] = failure
        else:
            step_times[dev.name] = step
    record = {**protocol.to_dict(), "devices": [str(d) for d in devs], "classes": classes,
              "transfer_sizes": list(transfer_sizes), "settle": settle.to_dict() if settle else None,
              "rounds": rounds, **runner.record()}
    if training is not None:
        record.update(training.to_dict())
    return Profile(devices=[d.name for d in devs], op_times=op_times,
                   transfers=_class_transfers(devs, classes, transfer_sizes),
                   folded_nodes=sorted(runner.folded_nodes), step_times=step_times, failures=failures,
                   graph_sha256=graph.sha256, protocol=record, control_flow=runner.control_flow(since=before))


def _profile_class(graph: OpGraph, engine: Engine, members: list[Device], devs: list[Device],
                   protocol: MeasureProtocol, settle: Settle | None, progress: Progress | None = None
                   ) -> tuple[dict[str, float], float, str | None, dict[str, Any]]:
    """Per-step and whole-step medians of the class, each round on the next member in turn, until
    they settle; and how many rounds that took. A round is one traced step (every node timed) and
    one plain step (the whole step as a placement runs: timing each node costs time too)."""
    used = members[:protocol.repeats]   # a member that would get no timed round is not started
    most = max(protocol.repeats, settle.max_rounds) if settle is not None else protocol.repeats
    steps: list[float] = []
    figures: list[tuple[float, float]] = []   # (whole-step median, sum of node medians) after each round
    try:
        with ExitStack() as stack:
            runs = [stack.enter_context(closing(engine.open(_alone(graph, d, devs)))) for d in used]
            for run in runs:
                for _ in range(protocol.warmup):   # both kinds of step, so that each path is warm
                    run.traced_step()
                    run.step()
            start = time.perf_counter()
            i = 0
            while i < protocol.repeats or (settle is not None and not _settled(figures, settle)
                                           and i < settle.max_rounds
                                           and time.perf_counter() - start < settle.max_seconds):
                run = runs[i % len(runs)]
                run.traced_step()
                steps.append(run.step())
                if settle is not None:
                    figures.append((statistics.median(steps), sum(_node_medians(runs, protocol.warmup).values())))
                i += 1
                if progress is not None:
                    progress(f"profiling {', '.join(d.name for d in used)}: round {i} of at most {most}, "
                             f"{time.perf_counter() - start:.0f} s")
            medians = _node_medians(runs, protocol.warmup)
    except ExecutionFailure as exc:
        log.info("profiling on %s failed (%s): %s", [d.name for d in used], exc.failure, exc)
        return {}, math.inf, f"{exc.failure}: {exc}", {"rounds": len(steps), "settled": False}
    settled = settle is None or _settled(figures, settle)
    if not settled:
        log.info("the profile on %s did not settle within %d rounds", [d.name for d in used], len(steps))
    return medians, statistics.median(steps), None, {"rounds": len(steps), "settled": settled}


def _node_medians(runs: list, warmup: int) -> dict[str, float]:
    """Node -> median seconds over the traced steps of every run, warm-ups left out."""
    samples: dict[str, list[float]] = {}
    for run in runs:
        for times in run.node_times()[warmup:]:
            for node, t in times.items():
                samples.setdefault(node, []).append(t)
    return {n: statistics.median(v) for n, v in samples.items()}


def _settled(figures: list[tuple[float, float]], settle: Settle) -> bool:
    """The last `settle.window` rounds moved each figure by at most `settle.tolerance`."""
    if len(figures) <= settle.window:
        return False
    now, before = figures[-1], figures[-1 - settle.window]
    return all(b > 0 and abs(a / b - 1.0) <= settle.tolerance for a, b in zip(now, before))


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
