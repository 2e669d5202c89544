"""Every baseline placer (and a learned placement) measured side by side on the same devices.

`compare` measures each row's placement with the given `Measurer` (the real one in `placer
compare`), predicts it with the simulator on the same costs, and sets every step time against the
best single device and the lower bound. `baseline_rows` runs the placers and times how long each
took; `learned_row` adds a learned placement. With a learned placement and `random_search` among
the rows, the comparison also reports what learning is worth: the learned step time against the
best of as many random placements. Reading a training run's files, the text table, CSV/JSON and
the chart are the command's (`placer.commands.compare`, `placer.commands.compare_report`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.measure.costmodel import CostModel
from placer.measure.lower_bound import LowerBound, lower_bound
from placer.measure.measurement import Measurement, Measurer
from placer.measure.training import TrainingSpec
from placer.measure.training_costs import TrainingStepCosts
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

    @property
    def step_time(self) -> float | None:
        m = self.measurement
        return m.step_time if m is not None and m.ok else None

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
                "ratio_to_lower_bound": self.ratio_to_lower_bound,
                "predicted_step_time_s": self.predicted_step_time,
                "peak_memory": dict(m.peak_memory) if m is not None else {},
                "device_counts": self.placement.device_counts() if self.placement is not None else {},
                "status": self.status, "measurement": m.to_dict() if m is not None else None}


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

    def to_dict(self) -> dict[str, Any]:
        return {"format": "placer.compare/1", "graph": self.graph, "graph_sha256": self.graph_sha256,
                "devices": self.devices, "caps": self.caps, "lower_bound": asdict(self.lower_bound),
                "best_single_device": self.best_single, "best_single_device_step_time_s": self.best_single_step_time,
                "learning_vs_random_search": self.learning, "info": self.info,
                "rows": [r.to_dict() for r in self.rows]}


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
    `options`: extra keyword arguments per placer name, e.g. {"random_search": {"samples": 2000}}.
    With `training` the placers see a training step's costs (`TrainingStepCosts`)."""
    check_placer_names(placers)
    if training is not None:
        cost = TrainingStepCosts(graph, devices, cost, training)
    rows = []
    for name in placers:
        spec = PLACERS[name]
        extra = (options or {}).get(name, {})
        variants = [(f"single:{d}", {"device": d}) for d in devices] if name == "single" else [(name, extra)]
        for label, kwargs in variants:
            row = CompareRow(label, name, spec.respects_memory, None)
            try:
                row.placement, row.find_time_s = _timed(spec.place, graph, devices, cost, caps, seed=seed, **kwargs)
            except PlacerError as exc:
                row.refused = str(exc)
            rows.append(row)
    return rows


def learned_row(graph: OpGraph, placement: Placement, devices: list[str], *, name: str = "learned",
                find_time_s: float | None = None, samples: int | None = None) -> CompareRow:
    """A learned placement as a row, checked against the graph and the compared devices;
    `find_time_s` is the training time, `samples` the placements the learner drew."""
    from placer.annotate.resolve import resolve_placement

    placement = resolve_placement(graph, placement)
    outside = sorted(set(placement.nodes.values()) - set(devices))
    if outside:
        raise PlacerError(f"the learned placement uses {', '.join(outside)}, which are not among the compared "
                          f"devices {', '.join(devices)}; pass --devices with the devices it was trained on")
    placement = Placement(devices=list(devices), nodes=placement.nodes, graph_sha256=placement.graph_sha256,
                          extra={"placer": {"name": "learned", "samples": samples}})
    return CompareRow(name, "learned", None, find_time_s, placement=placement)


def compare(graph: OpGraph, devices: list[str], measurer: Measurer, cost: CostModel, rows: list[CompareRow],
            caps: Caps | None = None, progress=None, training: TrainingSpec | None = None) -> Comparison:
    """Measure every row's placement, predict it, and set it against the best single device and the
    bound; with `training`, predictions and the bound are of the training step (`measurer` must
    measure training steps too)."""
    from placer.measure.simulator import Simulator

    caps = dict(caps or {})
    bound = lower_bound(graph, devices, cost, training)
    sim = Simulator(graph, devices, cost, [caps.get(d) for d in devices], training=training)
    index = {d: i for i, d in enumerate(devices)}
    for row in rows:
        if row.placement is None:
            continue
        if progress is not None:
            progress(row)
        row.measurement = measurer.measure(row.placement)
        predicted = sim.simulate([index[row.placement.nodes[n]] for n in graph.nodes])
        row.predicted_step_time = predicted.step_time if predicted.failure is None else None
    singles = [r for r in rows if r.placer == "single" and r.step_time is not None]
    best = min(singles, key=lambda r: r.step_time) if singles else None
    for row in rows:
        if row.step_time is None:
            continue
        if best is not None:
            row.speedup_vs_best_single = best.step_time / row.step_time
        if bound.value > 0:
            row.ratio_to_lower_bound = row.step_time / bound.value
    return Comparison(graph=graph.source, graph_sha256=graph.sha256, devices=list(devices), caps=caps,
                      lower_bound=bound, rows=rows, best_single=best.name if best else None,
                      best_single_step_time=best.step_time if best else None, learning=learning_worth(rows))


def learning_worth(rows: list[CompareRow]) -> dict[str, Any] | None:
    """The learned placement's measured step time against random search's (None unless both ran);
    ratio = random search / learned, above 1 when learning beat chance."""
    # The policy's own placement shows what was learned; the run's best one may be a lucky sample.
    ran = [r for r in rows if r.placer == "learned" and r.step_time is not None]
    learned = next((r for r in ran if r.name == "learned_greedy"), ran[0] if ran else None)
    searched = next((r for r in rows if r.placer == "random_search" and r.step_time is not None), None)
    if learned is None or searched is None:
        return None
    samples = lambda r: r.placement.extra.get("placer", {}).get("samples")  # noqa: E731
    return {"learned": learned.name, "learned_step_time_s": learned.step_time, "learned_samples": samples(learned),
            "random_search_step_time_s": searched.step_time, "random_search_samples": samples(searched),
            "ratio": searched.step_time / learned.step_time}
