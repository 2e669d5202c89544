"""The check of a cached profile on reuse: do the devices still run what its calibration predicts?

A profile is calibrated once, when it is taken (`placer.costmodel.calibration`). A machine that
was busy then, or is now, makes the cached figures wrong for every later use (nmt's cached
contention factor of 3.0 simulated a pipelined step 1.45x slower than one device where it
measured 1.61x faster). So on every reuse a few placements run for real, in one set of
interleaved rounds (`placer.measure.rounds`), few enough to cost seconds, not a retake's minute:

- each device alone, held to the calibrated single-device step of its class;
- the `REUSE_SPLITS` multi-device calibration placements whose devices overlap most (where the
  contention factors and the hand-over latency matter). Each is held to what the cached
  calibration predicts for it now, times the residual it left on that placement when it was taken
  (measured / predicted then; a robust fit leaves a few placements well off, and holding those to
  the bare prediction would retake the profile on every use), at the speed the devices alone run
  now against the calibration (the median over every single-device round): a drift of the whole
  machine then shows in the singles only. (A ratio to one device alone, paired round by round,
  cancels the drift too, but carries the preempted rounds of both steps: on a busy machine its
  interval was twice as wide.)

Something is off only when the whole 95% interval of its rounds lies beyond the tolerance: a few
rounds of a small graph are noisy, and a retake costs a minute. The rounds stop at the
calibration's minimum once every interval is tight (`reuse_rounds`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from placer.costmodel.calibration import CALIBRATION, PIPELINED, CalibrationProtocol, calibration_placements
from placer.costmodel.profile import Profile
from placer.costmodel.profiled import ProfiledCostModel
from placer.costmodel.simulator import Simulator
from placer.devices import Device, as_devices
from placer.graph.opgraph import OpGraph
from placer.measure.intervals import Interval, median_interval
from placer.measure.progress import Progress, rounds_progress, rounds_text
from placer.measure.rounds import Candidate, RoundsProtocol, measure_in_rounds
from placer.placement import Placement
from placer.program.training import TrainingSpec

# Multi-device calibration placements measured again on every reuse, beside each device alone: each adds
# the warm-up and 6 to 15 rounds (`reuse_rounds`) of one step.
REUSE_SPLITS = 2


@dataclass
class Staleness:
    """What the check on reuse found off (falsy: nothing, the cached profile holds)."""

    singles: dict[str, float] = field(default_factory=dict)   # class -> measured / calibrated - 1
    splits: dict[str, float] = field(default_factory=dict)    # placement -> measured / predicted - 1
    calibration: dict[str, Any] = field(default_factory=dict) # the cached calibration, for the note

    def __bool__(self) -> bool:
        return bool(self.singles or self.splits)

    def note(self) -> str:
        """One line: what is off, and by how much."""
        parts = []
        if self.singles:
            parts.append("the devices now run the whole graph " +
                         ", ".join(f"{o:+.0%} ({c})" for c, o in self.singles.items()) +
                         " off what it was calibrated on")
        if self.splits:
            factors = ", ".join(f"{f:.2f} ({c})" for c, f in self.calibration.get("slowdown", {}).items())
            handover = self.calibration.get("handover_s")
            parts.append("its multi-device predictions (contention factor " + (factors or "none") +
                         ("" if handover is None else f", hand-over {handover * 1e3:.3g} ms") +
                         ") are off a measurement now: " +
                         ", ".join(f"{label} {o:+.0%}" for label, o in self.splits.items()))
        return "; ".join(parts)


def stale_by(graph: OpGraph, devices: Sequence[Device | str], profile: Profile, measurer,
             protocol: CalibrationProtocol = CALIBRATION, training: TrainingSpec | None = None,
             pipelined: Callable[[], Any] | None = None, progress: Progress | None = None) -> Staleness:
    """What of a cached, calibrated `profile` the devices no longer give, from each device alone
    and a few of its calibration splits measured in interleaved rounds (`reuse_rounds`) with
    `measurer` (`pipelined`: makes the measurer of the pipelined split, when it is one of them).
    Only what is surely more than `protocol.tolerance` off counts. Nothing for a profile never calibrated.
    `progress` hears when the rounds start, and of them now and then."""
    calibration = profile.calibration or {}
    singles = calibration.get("single_step_times")
    if not singles:
        return Staleness()
    names = [d.name for d in as_devices(devices)]
    classes = profile.protocol["classes"]
    candidates = [Candidate(f"single:{d}", partial(measurer.open, Placement.single_device(
        list(graph.nodes), d, graph.sha256))) for d in names]
    splits = _splits_to_check(graph, names, profile, protocol, pipelined=pipelined is not None)
    pipelined_measurer = pipelined() if PIPELINED in splits else None
    candidates += [Candidate(label, partial((pipelined_measurer if label == PIPELINED else measurer).open, p))
                   for label, (p, _) in splits.items()]
    rounds = reuse_rounds(protocol)
    if progress is not None:
        progress.start(f"checking the cached profile on the devices: {len(candidates)} placements in "
                       f"{rounds_text(rounds)}")
    result = measure_in_rounds(candidates, rounds,
                               progress=rounds_progress(progress, "checking the profile") if progress else None)
    # a class is off only when the whole 95% interval of its devices' rounds (pooled) lies beyond
    # the tolerance: a few rounds of a small graph are noisy, and a retake costs a minute
    pooled: dict[str, list[float]] = {}
    for d in names:
        m = result.measurements[f"single:{d}"]
        if m.ok and classes[d] in singles:
            pooled.setdefault(classes[d], []).extend(m.times)
    off = Staleness(calibration=calibration)
    for c, times in pooled.items():
        if (got := _beyond(median_interval(times), singles[c], protocol.tolerance)) is not None:
            off.singles[c] = got
    if splits:
        predicted = _predicted(graph, names, profile, splits, training,
                               None if pipelined_measurer is None else pipelined_measurer.pipeline)
        # the machine's speed now against the calibration's, from every round of every device alone:
        # a split is held to its prediction at that speed, so a drift shows in the singles only
        pace = [t / singles[c] for c, times in pooled.items() for t in times]
        speed = median_interval(pace).value if pace else 1.0
        for label, (_, residual) in splits.items():
            m = result.measurements[label]
            if m.ok and (got := _beyond(median_interval(m.times), predicted[label] * residual * speed,
                                        protocol.tolerance)) is not None:
                off.splits[label] = got
    return off


def reuse_rounds(protocol: CalibrationProtocol) -> RoundsProtocol:
    """The calibration's rounds, stopped as soon as every interval is within half the tolerance
    (its minimum rounds on a quiet machine): six rounds' 95% interval is their whole range, which
    one preempted round on a busy machine stretches past any tolerance; up to its cap, the
    interval leaves the extreme rounds out."""
    return replace(protocol.rounds, precision=max(protocol.rounds.precision, protocol.tolerance / 2))


def _beyond(measured: Interval, predicted: float, tolerance: float) -> float | None:
    """measured / predicted - 1 when the whole interval lies more than `tolerance` off `predicted`."""
    if measured.low / predicted - 1.0 > tolerance or measured.high / predicted - 1.0 < -tolerance:
        return measured.value / predicted - 1.0
    return None


def _splits_to_check(graph: OpGraph, names: list[str], profile: Profile, protocol: CalibrationProtocol,
                     pipelined: bool) -> dict[str, tuple[Placement, float]]:
    """The calibration's multi-device placements whose devices overlap most (the pipelined split
    only when it can be measured: `pipelined`), each with the residual the calibration left on it
    (measured / predicted when taken; 1 in a record that did not keep its prediction)."""
    calibration = profile.calibration
    # the placements as calibration made them: from the profile without its calibration, and its seed
    raw = ProfiledCostModel(replace(profile, calibration={}))
    seed = calibration.get("protocol", {}).get("seed", protocol.seed)
    placements = dict(calibration_placements(graph, names, raw, seed))
    if pipelined and "contiguous" in placements:
        placements[PIPELINED] = placements["contiguous"]
    rows = [r for r in calibration.get("placements", [])
            if r["placement"] in placements and not r["placement"].startswith("single:")]
    rows.sort(key=lambda r: -max(r["overlap_s"], default=0.0) / r["uncontended_s"])
    return {r["placement"]: (placements[r["placement"]], r["measured_s"] / r.get("predicted_s", r["measured_s"]))
            for r in rows[:REUSE_SPLITS]}


def _predicted(graph: OpGraph, names: list[str], profile: Profile, splits: dict[str, tuple[Placement, float]],
               training: TrainingSpec | None, pipeline) -> dict[str, float]:
    """The cached calibration's step of each split."""
    cost = ProfiledCostModel(profile)
    sim = Simulator(graph, names, cost, training=training)
    piped = Simulator(graph, names, cost, training=training, pipeline=pipeline) if pipeline is not None else None
    index = {d: i for i, d in enumerate(names)}
    out = {}
    for label, (p, _) in splits.items():
        assign = [index[p.nodes[n]] for n in graph.nodes]
        out[label] = (piped if label == PIPELINED else sim).simulate(assign).step_time
    return out
