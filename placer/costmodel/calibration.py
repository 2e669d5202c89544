"""Checking a fresh profile against whole-graph measurements, and calibrating the simulator on them.

Right after profiling, a handful of placements run for real in interleaved rounds
(`placer.measure.rounds`): every device alone, and a few splits over the devices (contiguous
chunks of equal work, a greedy earliest-finish placement, random placements from even to mostly
one device, and whole groups of ops on random devices). Then:

- the check: a class whose predicted single-device step (the profile's) is more than `tolerance`
  off its measured one is profiled again (`retakes` times at most); when that does not help, the
  profile is flagged (one warning line, and `Profile.flag` in the file);
- the calibration: each class's single-device step becomes the measured one (the simulator
  spreads the difference over the nodes, `ProfiledCostModel`), and one contention factor per class
  (`placer.costmodel.contention`) and the hand-over latency between devices that share memory (a
  thread waking another costs more on a busy machine than alone) are fitted to the splits. They
  are stored with the profile; the simulator reads them from the cost model, and the lower bound
  the contention factors (it counts no transfers).

With a `pipelined` measurer, the contiguous split also runs as a pipelined step of
`PIPELINED_MICRO_BATCHES` micro-batches (`placer.program.pipeline`): the regime `--micro-batches`
runs in, devices busy together for most of the step with few hand-overs. Without it, the only
placements whose devices overlap much are the ones with hundreds of hand-overs (on a chain, none
overlap at all), so the factor mixes contention with their cost (nmt: 1.24 without the pipelined
step, 1.19 with it, in the same rounds).

Each placement's record keeps what the calibration predicts for it (`predicted_s`): a cached
profile is checked on reuse against a few of them (`placer.costmodel.reuse_check`).
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from placer.devices import Device, as_devices
from placer.graph.opgraph import OpGraph
from placer.costmodel.contention import contention_extra, fit_error, fit_slowdown
from placer.costmodel.protocol import CostModel
from placer.measure.measurer import RealMeasurer
from placer.program.pipeline import Pipeline
from placer.costmodel.profile import Profile
from placer.measure.progress import Progress, rounds_progress, rounds_text
from placer.measure.rounds import Candidate, RoundsProtocol, measure_in_rounds
from placer.program.training import TrainingSpec
from placer.placement import Placement

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CalibrationProtocol:
    """How a profile is checked and calibrated."""

    tolerance: float = 0.10    # a predicted single-device step this far off the measured one is retaken
    retakes: int = 1           # profiles taken again before the profile is flagged
    rounds: RoundsProtocol = field(default_factory=lambda: RoundsProtocol(
        warmup=1, min_rounds=6, max_rounds=15, max_seconds=60.0, precision=0.03))
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"tolerance": self.tolerance, "retakes": self.retakes, "rounds": self.rounds.to_dict(),
                "seed": self.seed}


CALIBRATION = CalibrationProtocol()
# micro-batches of the pipelined calibration step: the devices overlap for about 3/5 of it
PIPELINED_MICRO_BATCHES = 4
PIPELINED = "contiguous_pipelined"


def calibration_placements(graph: OpGraph, devices: list[str], cost: CostModel, seed: int = 0
                           ) -> list[tuple[str, Placement]]:
    """(label, placement): each device alone, then (two devices or more) a few splits."""
    names = list(graph.nodes)

    def placed(label: str, assign: Sequence[int]) -> tuple[str, Placement]:
        return label, Placement(list(devices), {n: devices[int(a)] for n, a in zip(names, assign)}, graph.sha256)

    out = [placed(f"single:{d}", [i] * len(names)) for i, d in enumerate(devices)]
    if len(devices) < 2:
        return out
    rng = np.random.default_rng(seed)
    D = len(devices)
    mostly = np.full(D, 0.25 / (D - 1))
    mostly[0] = 0.75
    out += [placed("contiguous", _contiguous(graph, devices, cost)),
            placed("earliest_finish", _earliest_finish(graph, devices, cost)),
            placed("random_even", rng.integers(0, D, size=len(names))),
            placed("random_mostly_one", rng.choice(D, size=len(names), p=mostly))]
    groups = _groups(graph, D)
    for k in range(2):   # whole groups of ops on random devices, as the learner places them
        on = rng.integers(0, D, size=len(groups))
        out.append(placed(f"random_groups{k}", [on[groups[n]] for n in names]))
    return out


def _groups(graph: OpGraph, n_devices: int) -> dict[str, int]:
    """Node -> its group in the learner's default grouping."""
    from placer.graph.grouping import group_graph

    return {n: g for g, members in enumerate(group_graph(graph, n_devices=n_devices).groups) for n in members}


def _fastest(graph: OpGraph, devices: list[str], cost: CostModel) -> list[float]:
    return [min(cost.op_time(node, d) for d in devices) for node in graph.nodes.values()]


def _contiguous(graph: OpGraph, devices: list[str], cost: CostModel) -> list[int]:
    """The topological order cut into one chunk per device, of about equal work each."""
    times = np.asarray([t if math.isfinite(t) else 0.0 for t in _fastest(graph, devices, cost)])
    before = np.cumsum(times) - times
    total = times.sum() if times.sum() > 0 else 1.0
    return [min(int(w / total * len(devices)), len(devices) - 1) for w in before]


def _earliest_finish(graph: OpGraph, devices: list[str], cost: CostModel) -> list[int]:
    """Each node, in topological order, on the device where it would finish first (list scheduling)."""
    free = [0.0] * len(devices)
    done: dict[str, tuple[float, int]] = {}
    assign = []
    for name, node in graph.nodes.items():
        best = None
        for d, dev in enumerate(devices):
            ready = max((t + (cost.transfer_time(0, devices[p], dev) if p != d else 0.0)
                         for t, p in (done[q] for q in graph.dag.predecessors(name))), default=0.0)
            finish = max(ready, free[d]) + cost.op_time(node, dev)
            if best is None or finish < best[0]:
                best = (finish, d)
        free[best[1]] = best[0]
        done[name] = best
        assign.append(best[1])
    return assign


def check_and_calibrate(graph: OpGraph, devices: Sequence[Device | str], profile: Profile,
                        retake: Callable[[], Profile], measurer: RealMeasurer,
                        protocol: CalibrationProtocol = CALIBRATION,
                        training: TrainingSpec | None = None, pipelined: RealMeasurer | None = None,
                        progress: Progress | None = None) -> Profile:
    """`profile` (or a retaken one) with its `calibration` set, flagged when its single-device
    steps stay more than `protocol.tolerance` off the measured ones after `protocol.retakes`.
    `pipelined`: a measurer of the same steps pipelined (its `pipeline`), for the contiguous split's
    pipelined step. `progress` hears when the rounds start, and of them now and then."""
    from placer.costmodel.profiled import ProfiledCostModel

    names = [d.name for d in as_devices(devices)]
    classes = profile.protocol["classes"]
    for attempt in range(protocol.retakes + 1):
        raw = ProfiledCostModel(profile)   # the profile's own single-device steps, no contention
        placements = calibration_placements(graph, names, raw, protocol.seed)
        # with a pipelined measurer: the contiguous split also as a pipelined step (two devices or more)
        piped = [(PIPELINED, dict(placements)["contiguous"])] if pipelined is not None and len(names) > 1 else []
        if progress is not None:
            progress.start(f"calibrating the simulator on whole-graph runs: {len(placements) + len(piped)} "
                           f"placements in {rounds_text(protocol.rounds)}")
        result = measure_in_rounds([Candidate(label, partial(measurer.open, p)) for label, p in placements] +
                                   [Candidate(label, partial(pipelined.open, p)) for label, p in piped],
                                   protocol.rounds,
                                   progress=rounds_progress(progress, "calibrating") if progress else None)
        measured = {label: m.step_time for label, m in result.measurements.items() if m.ok}
        singles = _class_medians({d: measured.get(f"single:{d}") for d in names}, classes)
        off = {c: singles[c] / _class_step(profile, classes, c) - 1.0 for c in singles}
        bad = {c: o for c, o in off.items() if abs(o) > protocol.tolerance}
        if not bad or attempt == protocol.retakes:
            break
        log.warning("the profile's single-device step is %s off a whole-graph measurement; profiling again",
                    ", ".join(f"{o:+.0%} ({c})" for c, o in bad.items()))
        profile = retake()
    flag = None
    if bad:
        flag = (f"the profile predicts one device's step {', '.join(f'{o:+.0%} off ({c})' for c, o in bad.items())} "
                f"of a whole-graph measurement, also after profiling again; its predictions and lower bound are "
                f"not to be trusted (a busy machine? --refresh-profile on a quieter one)")
        log.warning(flag)
    calibrated = replace(profile, calibration={"single_step_times": singles})
    slowdown, handover, rows = _fit(graph, names, calibrated, placements + piped, measured, classes, training,
                                    pipelined.pipeline if piped else None)
    for r in rows:   # what the calibration predicts: the check on reuse starts from its residual
        r["predicted_s"] = r["uncontended_s"] + contention_extra(r["overlap_s"], [slowdown[classes[d]] for d in names])
    record = {"single_step_times": singles, "slowdown": slowdown, "handover_s": handover, "off": off, "retakes": attempt,
              "placements": rows, "rounds": result.rounds, "capped": result.capped,
              "protocol": protocol.to_dict()}
    return replace(profile, calibration=record, flag=flag)


def _class_medians(per_device: dict[str, float | None], classes: dict[str, str]) -> dict[str, float]:
    by_class: dict[str, list[float]] = {}
    for d, t in per_device.items():
        if t is not None:
            by_class.setdefault(classes[d], []).append(t)
    return {c: statistics.median(ts) for c, ts in by_class.items()}


def _class_step(profile: Profile, classes: dict[str, str], cls: str) -> float:
    """The profile's whole-graph step of a class (what the simulator predicts for one device)."""
    return next(profile.step_times[d] for d, c in classes.items() if c == cls and d in profile.step_times)


def _fit(graph: OpGraph, names: list[str], profile: Profile, placements: list[tuple[str, Placement]],
         measured: dict[str, float], classes: dict[str, str], training: TrainingSpec | None,
         pipeline: Pipeline | None = None) -> tuple[dict[str, float], float | None, list[dict[str, Any]]]:
    """Contention factors per class and the hand-over latency between devices that share memory
    (None: the profiled one) that best explain the measured splits, and each placement's figures.
    The latency is searched on a grid (it moves the schedule), the factors fitted for each.
    The placement labelled `PIPELINED` is simulated as a step of `pipeline`."""
    kinds = sorted(set(classes[d] for d in names))
    groups = [kinds.index(classes[d]) for d in names]
    shared = [t.latency_s for t in profile.transfers if t.bandwidth_Bps is None]
    grid: list[float | None] = [None]
    if shared:
        base = max(statistics.median(shared), 1e-7)
        grid += np.geomspace(base, max(base * 1000, 5e-3), 24).tolist()
    best = None
    for handover in grid:
        calibration = {**profile.calibration, **({} if handover is None else {"handover_s": handover})}
        rows = _schedules(graph, names, replace(profile, calibration=calibration), placements, measured, training,
                          pipeline)
        if not rows:
            return dict.fromkeys(kinds, 1.0), None, []
        overlaps = np.asarray([r["overlap_s"] for r in rows])
        predicted = np.asarray([r["uncontended_s"] for r in rows])
        times = np.asarray([r["measured_s"] for r in rows])
        factors = fit_slowdown(overlaps, predicted, times, groups, len(kinds))
        extra = ((factors[groups] - 1.0)[None, :] * overlaps).max(axis=1)
        error = fit_error((predicted + extra - times) / times)
        if best is None or error < best[0] * (1 - 1e-6):
            best = (error, handover, factors, rows)
    _, handover, factors, rows = best
    return {c: float(f) for c, f in zip(kinds, factors)}, handover, rows


def _schedules(graph: OpGraph, names: list[str], profile: Profile, placements: list[tuple[str, Placement]],
               measured: dict[str, float], training: TrainingSpec | None, pipeline: Pipeline | None = None
               ) -> list[dict[str, Any]]:
    """Each measured placement's uncontended simulated step and its devices' shared busy seconds
    (the `PIPELINED` one's as a step of `pipeline`)."""
    from placer.costmodel.profiled import ProfiledCostModel
    from placer.costmodel.simulator import Simulator

    cost = ProfiledCostModel(profile)
    sim = Simulator(graph, names, cost, training=training)
    piped = Simulator(graph, names, cost, training=training, pipeline=pipeline) if pipeline is not None else None
    index = {d: i for i, d in enumerate(names)}
    rows = []
    for label, p in placements:
        r = (piped if label == PIPELINED and piped is not None else sim).simulate(
            [index[p.nodes[n]] for n in graph.nodes], overlap=True)
        if label in measured and r.failure is None:
            rows.append({"placement": label, "measured_s": measured[label], "uncontended_s": r.step_time,
                         "overlap_s": r.overlap})
    return rows
