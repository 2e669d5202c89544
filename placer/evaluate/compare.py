"""Every baseline placer (and a learned placement) measured side by side on the same devices.

`compare` measures every row in interleaved rounds (`placer.measure.rounds`: each round runs every
row once, in a shuffled order, so that the machine's drift lands on all of them alike), predicts it
with the simulator on the same costs, and sets every step time against the best single device and
the lower bound as paired ratios with 95% intervals, and judges every row against the fastest
(`placer.measure.intervals.speedup_verdict`: tied when its whole interval lies within 2%, "not
resolved" when it reaches across the band's edge). A `control` row measures the best single
device's placement a second time: the two must agree, or the measurement itself is off, and the
comparison says so. `baseline_rows` runs the placers and times how long each took; `learned_row`
adds a learned placement. With a learned placement and `random_search` among
the rows, the comparison also reports what learning is worth: the learned step time against the
best of as many random placements. Reading a training run's files is the job's
(`placer.jobs.compare`); the text table, CSV/JSON and the chart are `placer.evaluate.report`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.measure.intervals import FASTER, TIED, Interval, speedup_verdict, verdict_record
from placer.costmodel.lower_bound import LowerBound, bounds, check_bound
from placer.engines.protocol import PlacedRun
from placer.measure.measurement import Measurement, Measurer, OpensPlacements
from placer.measure.progress import Progress, rounds_progress, rounds_text
from placer.measure.rounds import Candidate, RoundsProtocol, RoundsResult, measure_in_rounds
from placer.program.training import TrainingSpec
from placer.costmodel.training_costs import TrainingStepCosts
from placer.placement import Placement
from placer.placers import PLACERS
from placer.placers.base import Caps


@dataclass
class CompareRow:
    """One placement in the comparison: who made it, how fast it was found, what it measured."""

    name: str                          # "single:cpu:0", "metis", "learned", ...
    placer: str                        # registry name, or "learned"
    respects_memory: bool | None       # None: not a placer (the learned placement)
    find_time_s: float | None          # seconds the placer took (training time for "learned")
    placement: Placement | None = None
    measurement: Measurement | None = None
    predicted_step_time: float | None = None   # the simulator on the same costs
    refused: str | None = None         # why the placer gave no placement (e.g. does not fit the caps)
    speedup_vs_best_single: float | None = None
    ratio_to_lower_bound: float | None = None
    # Paired speedups (reference time / this row's time, per round) with their 95% intervals
    vs_best_single: Interval | None = None
    vs_whole_machine: Interval | None = None
    vs_fastest: Interval | None = None       # below 1 unless this row is the fastest
    vs_fastest_verdict: str | None = None    # its verdict against the fastest (None for the fastest itself)
    tied_with_fastest: bool = False
    # Rows that do not run on the compared devices (whole_machine, onnxruntime) open their own run
    opener: Callable[[], PlacedRun] | None = field(default=None, repr=False)
    run_record: dict[str, Any] = field(default_factory=dict, repr=False)   # how such a row runs
    note: str | None = None                  # what the row is, for rows that are not placers
    plan: bool = False                       # a plan that splits ops (`placer.evaluate.plan_rows`), no placement
    split_plan: Any = None                   # that plan (a `placer.plans.plan.Plan`), saved beside the placements

    @property
    def step_time(self) -> float | None:
        m = self.measurement
        return m.step_time if m is not None and m.ok else None

    @property
    def proven_gap(self) -> float | None:
        """The exact solver's proven gap, (objective - bound) / objective in its model (0: optimal
        there); None for every other row, or where it proved no bound."""
        if self.placer != "exact" or self.placement is None:
            return None
        return self.placement.extra.get("placer", {}).get("gap")

    @property
    def status(self) -> str:
        if self.refused:
            return f"refused: {self.refused}"
        m = self.measurement
        if m is None:
            return "not measured"
        return "ok" if m.ok else f"{m.failure}: {m.reason}"

    def to_dict(self) -> dict[str, Any]:
        m = self.measurement
        return {"name": self.name, "placer": self.placer, "respects_memory": self.respects_memory,
                "find_time_s": self.find_time_s, "step_time_s": self.step_time,
                "spread_s": m.spread if m is not None and m.ok else None,
                "speedup_vs_best_single": self.speedup_vs_best_single,
                "speedup_vs_best_single_interval": _interval_dict(self.vs_best_single),
                "speedup_vs_whole_machine_interval": _interval_dict(self.vs_whole_machine),
                "speedup_vs_fastest_interval": _interval_dict(self.vs_fastest),
                "vs_fastest_verdict": self.vs_fastest_verdict,
                "tied_with_fastest": self.tied_with_fastest, "note": self.note,
                "ratio_to_lower_bound": self.ratio_to_lower_bound,
                "predicted_step_time_s": self.predicted_step_time, "proven_gap": self.proven_gap,
                "peak_memory": dict(m.peak_memory) if m is not None else {},
                "device_counts": self.placement.device_counts() if self.placement is not None else {},
                "status": self.status, "measurement": m.to_dict() if m is not None else None}


def _interval_dict(interval: Interval | None) -> dict[str, Any] | None:
    return interval.to_dict() if interval is not None else None


@dataclass
class Comparison:
    """The whole table plus what every row is set against."""

    graph: str
    graph_sha256: str
    devices: list[str]
    caps: Caps
    lower_bound: LowerBound
    rows: list[CompareRow] = field(default_factory=list)
    best_single: str | None = None
    best_single_step_time: float | None = None
    info: dict[str, Any] = field(default_factory=dict)   # profile source, protocol, ...
    learning: dict[str, Any] | None = None   # learned vs. random search, see `learning_worth`
    fastest: str | None = None               # the row with the lowest median
    micro_batches: int = 1                   # a pipelined step pushes this many: throughput = M / step time
    rounds: dict[str, Any] | None = None     # how many interleaved rounds ran, and whether a cap ended them
    control: dict[str, Any] | None = None    # the control row against its twin, see `control_check`
    verdicts: list[dict[str, Any]] = field(default_factory=list)   # the headline pairs, see `headline_verdicts`
    notes: list[str] = field(default_factory=list)   # one line each: caps hit, noise, what to use instead
    history: dict[str, Any] | None = None    # against the previous run, see `placer.evaluate.history`
    instead: list[str] = field(default_factory=list)   # whole-model rows faster than every placement: use them
    plan_bound: LowerBound | None = None     # the bound over plans (ops split too), where a row is a plan

    def row(self, name: str) -> CompareRow | None:
        return next((r for r in self.rows if r.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"format": "placer.compare/1", "graph": self.graph, "graph_sha256": self.graph_sha256,
                "devices": self.devices, "caps": self.caps, "lower_bound": asdict(self.lower_bound),
                "plan_lower_bound": asdict(self.plan_bound) if self.plan_bound else None,
                "best_single_device": self.best_single, "fastest": self.fastest,
                "micro_batches": self.micro_batches, "best_single_device_step_time_s": self.best_single_step_time,
                "learning_vs_random_search": self.learning, "rounds": self.rounds, "control": self.control,
                "verdicts": self.verdicts, "use_instead": self.instead, "notes": self.notes, "history": self.history,
                "info": self.info,
                "rows": [{**r.to_dict(), "throughput_per_s": self.throughput(r)} for r in self.rows]}

    def throughput(self, row: CompareRow) -> float | None:
        """Micro-batches (inputs) per second of a row's step."""
        return self.micro_batches / row.step_time if row.step_time else None


def _timed(fn, *args, **kwargs) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def check_placer_names(placers: list[str]) -> None:
    """PlacerError naming any placer the registry does not have."""
    unknown = [p for p in placers if p not in PLACERS]
    if unknown:
        raise PlacerError(f"unknown placer(s) {', '.join(unknown)}; choose from {', '.join(PLACERS)}")


def baseline_rows(graph: OpGraph, devices: list[str], cost: CostModel, caps: Caps, placers: list[str],
                  seed: int = 0, options: dict[str, dict[str, Any]] | None = None,
                  training: TrainingSpec | None = None) -> list[CompareRow]:
    """Run the placers (`single` expands to one row per device); a refusal becomes a row too.
    `options`: extra keyword arguments per placer name, e.g. {"random_search": {"samples": 2000}};
    local search takes random search's samples and pipeline unless given its own (`SAME_BUDGET`).
    With `training` the placers see a training step's costs (`TrainingStepCosts`)."""
    check_placer_names(placers)
    if training is not None:
        cost = TrainingStepCosts(graph, devices, cost, training)
    rows = []
    for name in placers:
        spec = PLACERS[name]
        extra = _options_of(name, options or {})
        variants = [(f"single:{d}", {"device": d}) for d in devices] if name == "single" else [(name, extra)]
        for label, kwargs in variants:
            row = CompareRow(label, name, spec.respects_memory, None)
            try:
                row.placement, row.find_time_s = _timed(spec.place, graph, devices, cost, caps, seed=seed, **kwargs)
            except PlacerError as exc:
                row.refused = str(exc)
            rows.append(row)
    return rows


# Placers searching the simulator with random search's budget: unless given their own options, they
# take these of random search's (its sample count, the learner's: the same yardstick; its pipeline).
SAME_BUDGET = {"local_search": ("samples", "pipeline")}


def _options_of(name: str, options: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The keyword arguments of placer `name`: its own options, else what it shares of random search's."""
    if name in options or name not in SAME_BUDGET:
        return options.get(name, {})
    shared = options.get("random_search", {})
    return {k: shared[k] for k in SAME_BUDGET[name] if k in shared}


def learned_row(graph: OpGraph, placement: Placement, devices: list[str], *, name: str = "learned",
                find_time_s: float | None = None, samples: int | None = None,
                check_devices: bool = True, placer: str = "learned", what: str = "the learned placement",
                fix: str = "pass --devices with the devices it was trained on") -> CompareRow:
    """A learned placement as a row, checked against the graph and the compared devices (and,
    with `check_devices`, against this machine's: not for a simulated comparison on a described
    cluster); `find_time_s` is the training time, `samples` the placements the learner drew.
    `placer` labels the row (`INCLUDED` for a user's placement file), `what` names the placement
    and `fix` says what to do in the one-line error of a device the comparison lacks."""
    from placer.annotate.resolve import resolve_placement

    placement = resolve_placement(graph, placement, check_devices=check_devices)
    outside = sorted(set(placement.nodes.values()) - set(devices))
    if outside:
        raise PlacerError(f"{what} uses {', '.join(outside)}, which are not among the compared "
                          f"devices {', '.join(devices)}; {fix}")
    placement = Placement(devices=list(devices), nodes=placement.nodes, graph_sha256=placement.graph_sha256,
                          extra={"placer": {"name": placer, "samples": samples}})
    return CompareRow(name, placer, None, find_time_s, placement=placement)


# The row label of a placement file a user puts beside the baselines (compare --include-placement)
INCLUDED = "included"


CONTROL = "control"
WHOLE_MACHINE = "whole_machine"
# The control row and its twin measure one placement twice: they must agree within this.
CONTROL_TOLERANCE = 0.03


def compare(graph: OpGraph, devices: list[str], measurer: Measurer, cost: CostModel, rows: list[CompareRow],
            caps: Caps | None = None, progress=None, training: TrainingSpec | None = None,
            rounds: RoundsProtocol = RoundsProtocol(), pipeline=None, shortcut: str = "") -> Comparison:
    """Measure every row's placement (in interleaved rounds when `measurer` can `open` placements,
    with a control row), predict it, and set it against the best single device, the whole machine,
    the fastest row and the bound; with `training`, predictions and the bound are of the training
    step (`measurer` must measure training steps too), with `pipeline` of the pipelined step (and
    every row gets its throughput). `progress(text)` hears when the rounds start (with `shortcut`,
    the option that shortens them) and how far along they are, now and then."""
    from placer.costmodel.simulator import Simulator

    caps = dict(caps or {})
    # plans split ops, so the placements' bound does not hold for them: theirs is over every split
    bound, plan_bound = bounds(graph, devices, cost, training, pipeline, caps, plans=any(r.plan for r in rows))
    sim = Simulator(graph, devices, cost, [caps.get(d) for d in devices], training=training, pipeline=pipeline)
    index = {d: i for i, d in enumerate(devices)}
    for row in rows:
        if row.placement is not None and row.opener is None:
            predicted = sim.simulate([index[row.placement.nodes[n]] for n in graph.nodes])
            row.predicted_step_time = predicted.step_time if predicted.failure is None else None
    result = None
    if isinstance(measurer, OpensPlacements):   # real: interleaved rounds, with a control row
        rows = _with_control(rows)
        measured = [r for r in rows if r.placement is not None or r.opener is not None]
        twin = next((r for r in rows if r.name == CONTROL), None)
        record = measurer.run_record()   # how a step is run (the rounds' record says how it was timed)
        candidates = [Candidate(r.name, r.opener, r.run_record) if r.opener else
                      Candidate(r.name, partial(measurer.open, r.placement), record) for r in measured]
        told = Progress(progress) if progress is not None else None
        if told is not None:
            told.start(f"measuring {len(candidates)} placements side by side: {rounds_text(rounds)}"
                       + (f" ({shortcut})" if shortcut else ""))
        result = measure_in_rounds(candidates, rounds, reference=twin.placer if twin else None,
                                   progress=rounds_progress(told, "side by side") if told is not None else None)
        for r in measured:
            r.measurement = result.measurements[r.name]
    else:   # a simulated or analytic measurer: deterministic, one measurement each
        for r in (r for r in rows if r.placement is not None):
            if progress is not None:
                progress(f"measuring {r.name} ...")
            r.measurement = measurer.measure(r.placement)
    speedup = partial(_speedup, result)
    singles = [r for r in rows if r.placer == "single" and r.step_time is not None]
    best = min(singles, key=lambda r: r.step_time) if singles else None
    ok = [r for r in rows if r.step_time is not None]
    fastest = min(ok, key=partial(_paired_order, speedup, best)) if ok else None
    whole = next((r for r in ok if r.name == WHOLE_MACHINE), None)
    for row in ok:
        if best is not None:
            row.vs_best_single = speedup(row, best)
            row.speedup_vs_best_single = best.step_time / row.step_time
        if whole is not None:
            row.vs_whole_machine = speedup(row, whole)
        row.vs_fastest = speedup(row, fastest)
        row.vs_fastest_verdict = None if row is fastest else speedup_verdict(row.vs_fastest)
        row.tied_with_fastest = row is fastest or row.vs_fastest_verdict == TIED
        row_bound = plan_bound if row.plan else bound
        if row_bound is not None and row_bound.value > 0:
            row.ratio_to_lower_bound = row.step_time / row_bound.value
    comparison = Comparison(graph=graph.source, graph_sha256=graph.sha256, devices=list(devices), caps=caps,
                            lower_bound=bound, rows=rows, best_single=best.name if best else None,
                            best_single_step_time=best.step_time if best else None,
                            learning=learning_worth(rows, speedup), fastest=fastest.name if fastest else None,
                            plan_bound=plan_bound)
    comparison.verdicts = headline_verdicts(rows, speedup, best)
    comparison.micro_batches = pipeline.micro_batches if pipeline is not None else 1
    if result is not None:
        comparison.rounds = {"rounds": result.rounds, "blocks": len(set(result.blocks)), "capped": result.capped,
                             "seconds": round(result.seconds, 1), "protocol": rounds.to_dict()}
        comparison.control = control_check(comparison, speedup, rounds.precision)
        placed = {r.name: r.step_time for r in ok if r.opener is None}   # on these devices: the bound holds
        comparison.notes = [n for n in (result.cap_note(), _noise_note(comparison.control, rounds.precision),
                                        check_bound(bound, placed, rounds.precision))
                            if n]
    # simulated too: a plan row (data parallelism, ...) beats every placement as the whole machine can
    comparison.instead = _faster_than_placements(comparison, speedup)
    # of the plans only the fastest, as the verdicts name it
    plans = [name for name in comparison.instead if comparison.row(name).plan]
    comparison.notes += [_instead_note(comparison, name) for name in comparison.instead
                         if name not in plans or name == plans[0]]
    return comparison


def _with_control(rows: list[CompareRow]) -> list[CompareRow]:
    """`rows` plus the control row: the single-device placement predicted fastest, measured again
    as a row of its own (its `placer` names its twin), placed before the rows of other devices."""
    singles = [r for r in rows if r.placer == "single" and r.placement is not None]
    if not singles or any(r.name == CONTROL for r in rows):
        return rows
    twin = min(singles, key=lambda r: (r.predicted_step_time is None, r.predicted_step_time or 0.0))
    control = CompareRow(CONTROL, twin.name, None, None, placement=twin.placement,
                         predicted_step_time=twin.predicted_step_time,
                         note=f"{twin.name} measured a second time, as a check of the measurement")
    placed = max(i for i, r in enumerate(rows) if r.opener is None) + 1
    return rows[:placed] + [control] + rows[placed:]


def _paired_order(speedup, reference: CompareRow | None, row: CompareRow) -> float:
    """A sort key, fastest first: the row's paired speedup over `reference` (the best single device),
    negated; its own median without one. Medians taken apart carry the machine's drift between
    rounds (m-SCT and random search swapped places between two runs by their medians, their paired
    ratios to one device apart by 8%)."""
    if reference is None:
        return row.step_time
    return -speedup(row, reference).value


def _speedup(result: RoundsResult | None, row: CompareRow, reference: CompareRow) -> Interval:
    """`reference`'s time over `row`'s: paired over the rounds both ran, or exact for a
    deterministic (simulated) measurer."""
    if result is not None:
        ratio = result.ratio(reference.name, row.name)
        if ratio is not None:
            return ratio
    value = reference.step_time / row.step_time
    return Interval(value, value, value, 1)


def control_check(comparison: Comparison, speedup, precision: float) -> dict[str, Any] | None:
    """The control row against its twin: their paired ratio, whether it is within
    `CONTROL_TOLERANCE` of 1 (the same placement measured twice must agree), whether its interval
    is within `precision`, and the verdict the table and the notes both read (`control_verdict`)."""
    control = comparison.row(CONTROL)
    twin = comparison.row(control.placer) if control is not None else None
    if control is None or twin is None or control.step_time is None or twin.step_time is None:
        return None
    ratio = speedup(control, twin)
    check = {"twin": twin.name, "ratio": ratio.to_dict(), "difference": abs(ratio.value - 1.0),
             "agrees": abs(ratio.value - 1.0) <= CONTROL_TOLERANCE,
             "within_precision": ratio.relative_half_width <= precision, "precision": precision}
    return {**check, "verdict": control_verdict(check)}


# What the control says: the one source of the table's control line and of the noise note.
AGREES, IMPRECISE, DISAGREES = "agrees", "agrees, imprecise", "disagrees"


def control_verdict(control: dict[str, Any]) -> str:
    """`AGREES` (within the tolerance, interval within the precision), `IMPRECISE` (within the
    tolerance, interval wider than the precision asked) or `DISAGREES` (beyond the tolerance)."""
    if not control["agrees"]:
        return DISAGREES
    return AGREES if control["within_precision"] else IMPRECISE


def _noise_note(control: dict[str, Any] | None, precision: float) -> str | None:
    """One line when the control shows the machine noisier than the requested precision allows,
    worded by its verdict: a control that agrees is never said to differ."""
    verdict = control_verdict(control) if control is not None else AGREES
    if verdict == AGREES:
        return None
    r, twin = control["ratio"], control["twin"]
    interval = f"{r['low']:.3f}-{r['high']:.3f}"
    said = (f"noisy measurement: the control and {twin} (the same placement) differ by {control['difference']:.1%}, "
            f"beyond the {CONTROL_TOLERANCE:.0%} they may (interval {interval}, asked +-{precision:.0%})"
            if verdict == DISAGREES else
            f"imprecise measurement: the control agrees with {twin} (the same placement) within "
            f"{CONTROL_TOLERANCE:.0%}, but its interval {interval} is wider than the +-{precision:.0%} asked")
    return f"{said}; a quiet machine, more rounds (--max-rounds, --max-seconds) or OMP_WAIT_POLICY=PASSIVE help"


def profile_drift_notes(comparison: Comparison, cached: bool) -> list[str]:
    """The lower bound and predictions come from the profile (`cached`: read from the cache): one
    line per single device that now runs the graph at a clearly different speed than profiled."""
    notes = []
    for row in comparison.rows:
        profiled = row.predicted_step_time   # what the (calibrated) simulator predicts for the device alone
        if row.placer == "single" and row.step_time and profiled and not 0.8 < row.step_time / profiled < 1.25:
            notes.append(f"{row.name.removeprefix('single:')} ran the whole graph in {row.step_time * 1e3:.1f} ms "
                         f"now but the profile predicts {profiled * 1e3:.1f} ms{' (cached profile)' if cached else ''}; "
                         "the lower bound and predictions assume the profiled speed (--refresh-profile measures again)")
    return notes


def _placements(comparison: Comparison) -> list[CompareRow]:
    """The rows that ran and are placements on the compared devices: no control, no whole-model row,
    no plan."""
    return [r for r in comparison.rows if r.step_time is not None and r.opener is None and r.name != CONTROL
            and not is_plan(r)]


def is_plan(row: CompareRow) -> bool:
    """A row of a plan that splits ops (`placer.evaluate.plan_rows`), which is no placement."""
    return row.plan


def fastest_plan(rows: list[CompareRow]) -> CompareRow | None:
    """The plan row with the lowest step time, or None when no plan ran."""
    return min((r for r in rows if is_plan(r) and r.step_time is not None), key=lambda r: r.step_time, default=None)


def best_placement(comparison: Comparison) -> CompareRow | None:
    """The placement with the lowest median (`_placements`), or None when none ran."""
    return min(_placements(comparison), key=lambda r: r.step_time, default=None)


def _faster_than_placements(comparison: Comparison, speedup) -> list[str]:
    """The rows a user runs instead of a placement (one device with all the cores, ONNX Runtime on
    the whole model, a plan) that are faster than every placement on the compared devices, beyond
    the noise; fastest first."""
    placed = _placements(comparison)
    faster = [row for row in comparison.rows if (row.opener is not None or is_plan(row)) and row.step_time is not None
              and placed and all(speedup_verdict(speedup(row, r)) == FASTER for r in placed)]
    return [row.name for row in sorted(faster, key=lambda r: r.step_time)]


def _instead_note(comparison: Comparison, name: str) -> str:
    """Plain words when a placement is not worth it: row `name` is faster than every placement."""
    row, best = comparison.row(name), best_placement(comparison)
    return (f"{row.name} ({row.note}) is faster than every placement on {', '.join(comparison.devices)}: "
            f"{row.step_time * 1e3:.1f} ms against the best placement's ({best.name}) {best.step_time * 1e3:.1f} ms; "
            "use it instead of a placement")


def headline_verdicts(rows: list[CompareRow], speedup, best_single: CompareRow | None) -> list[dict[str, Any]]:
    """What a user asks of a comparison, each a paired speedup with its verdict (`verdict_record`):
    the run's placement (`learned`, its placement.json; else the best placer's) against
    the best baseline placer (by paired speedup over the best single device), the best single
    device, the whole machine as one device, ONNX Runtime and the fastest plan."""
    ok = [r for r in rows if r.step_time is not None]
    # the control row's placer names its twin: it is no placer of its own
    placers = [r for r in ok if r.placer not in ("learned", INCLUDED, "single") and r.name != CONTROL
               and r.opener is None and not is_plan(r)]
    best_placer = min(placers, key=partial(_paired_order, speedup, best_single)) if placers else None
    learned = [r for r in ok if r.placer == "learned"]
    # the run's placement.json, what `placer apply` takes: the placement a user gets from the run
    included = [r for r in ok if r.placer == INCLUDED]
    subject = next((r for r in learned if r.name == "learned"), (learned + included + [best_placer])[0])
    if subject is None:
        return []
    plan = fastest_plan(ok)
    references = [(best_placer, "the best baseline placer"), (best_single, "the best single device")] + \
                 [(r, r.note) for r in ok if r.opener is not None and not is_plan(r)] + \
                 ([(plan, "the fastest plan")] if plan else [])
    out = []
    for ref, what in references:
        if ref is None or ref is subject:
            continue
        interval = speedup(subject, ref)
        out.append({"subject": subject.name, "reference": ref.name, "what": what, "speedup": interval.to_dict(),
                    **verdict_record(interval)})
    return out


def learning_worth(rows: list[CompareRow], speedup=None) -> dict[str, Any] | None:
    """The learned placement's measured step time against random search's (None unless both ran);
    ratio = random search / learned, above 1 when learning beat chance, with its paired interval
    and its verdict (`verdict_record`)."""
    # The policy's own placement shows what was learned; the run's best one may be a lucky sample.
    ran = [r for r in rows if r.placer == "learned" and r.step_time is not None]
    learned = next((r for r in ran if r.name == "learned_greedy"), ran[0] if ran else None)
    searched = next((r for r in rows if r.placer == "random_search" and r.step_time is not None), None)
    if learned is None or searched is None:
        return None
    samples = lambda r: r.placement.extra.get("placer", {}).get("samples")  # noqa: E731
    interval = (speedup or partial(_speedup, None))(learned, searched)
    return {"learned": learned.name, "learned_step_time_s": learned.step_time, "learned_samples": samples(learned),
            "random_search_step_time_s": searched.step_time, "random_search_samples": samples(searched),
            "ratio": searched.step_time / learned.step_time, "interval": interval.to_dict(),
            **verdict_record(interval)}
