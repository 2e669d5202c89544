"""Every baseline placer (and a learned placement) measured side by side on the same devices.

`compare` runs each placer, times how long it took to find its placement, measures the result
with the given `Measurer` (the real one in `placer compare`), predicts it with the simulator on
the same costs, and sets every step time against the best single device and the lower bound. With a
learned placement and `random_search` among the rows, it also reports what learning is worth: the
learned step time against the best of as many random placements.
`write_outputs` saves the table as CSV and JSON and a bar chart as PNG (matplotlib).
"""

from __future__ import annotations

import csv
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.measure.costmodel import CostModel
from placer.measure.lower_bound import LowerBound, lower_bound
from placer.measure.measurement import Measurement, Measurer
from placer.placement import Placement
from placer.placers import PLACERS
from placer.placers.base import Caps

log = logging.getLogger(__name__)


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
                  seed: int = 0, options: dict[str, dict[str, Any]] | None = None) -> list[CompareRow]:
    """Run the placers (`single` expands to one row per device); a refusal becomes a row too.
    `options`: extra keyword arguments per placer name, e.g. {"random_search": {"samples": 2000}}."""
    check_placer_names(placers)
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


def learned_row(graph: OpGraph, run_dir: str | Path, devices: list[str]) -> CompareRow:
    """The best placement of a training run (runs/NAME/placement.json), checked against the graph."""
    from placer.annotate.resolve import resolve_placement

    run_dir = Path(run_dir)
    path = run_dir / "placement.json" if run_dir.is_dir() else run_dir
    placement = resolve_placement(graph, Placement.load(path))
    outside = sorted(set(placement.nodes.values()) - set(devices))
    if outside:
        raise PlacerError(f"the learned placement uses {', '.join(outside)}, which are not among the compared "
                          f"devices {', '.join(devices)}; pass --devices with the devices it was trained on")
    summary = run_summary(run_dir)
    placement = Placement(devices=list(devices), nodes=placement.nodes, graph_sha256=placement.graph_sha256,
                          extra={"placer": {"name": "learned", "samples": summary.get("samples")}})
    return CompareRow("learned", "learned", None, summary.get("wall_time_s"), placement=placement)


def learned_rows(graph: OpGraph, run_dir: str | Path, devices: list[str]) -> list[CompareRow]:
    """The run's best placement ("learned") and, when the run saved it, the policy's own greedy
    placement ("learned_greedy"): the one that shows what the policy learned."""
    rows = [learned_row(graph, run_dir, devices)]
    greedy = Path(run_dir) / "greedy_placement.json"
    if Path(run_dir).is_dir() and greedy.is_file():
        row = learned_row(graph, greedy, devices)
        row.name = "learned_greedy"
        rows.append(row)
    return rows


def run_summary(run_dir: str | Path) -> dict[str, Any]:
    """A training run's summary.json (next to its placement.json), or {} when absent or unreadable."""
    run_dir = Path(run_dir)
    path = (run_dir if run_dir.is_dir() else run_dir.parent) / "summary.json"
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        log.warning("could not read %s; the learned placement's search time and samples are unknown", path)
        return {}


def compare(graph: OpGraph, devices: list[str], measurer: Measurer, cost: CostModel, rows: list[CompareRow],
            caps: Caps | None = None, progress=None) -> Comparison:
    """Measure every row's placement, predict it, and set it against the best single device and the bound."""
    from placer.measure.simulator import Simulator

    caps = dict(caps or {})
    bound = lower_bound(graph, devices, cost)
    sim = Simulator(graph, devices, cost, [caps.get(d) for d in devices])
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


def format_table(comparison: Comparison) -> str:
    """The comparison as a fixed-width text table (times in ms, memory in MiB)."""
    devices = comparison.devices
    head = ["placement", "step ms", "spread", "vs best 1-dev", "/ bound", "predicted"] + \
           [f"peak {d} MiB" for d in devices] + ["find s", "caps", "status"]
    lines = []
    for r in comparison.rows:
        m = r.measurement
        peaks = [f"{m.peak_memory[d] / 2**20:.1f}" if m is not None and d in m.peak_memory else "-" for d in devices]
        caps = "-" if not comparison.caps else ("respects" if r.respects_memory else
                                                "ignores" if r.respects_memory is False else "?")
        lines.append([r.name, _num(r.step_time, 1e3, 2), _num(m.spread if m and m.ok else None, 1e3, 2),
                      _num(r.speedup_vs_best_single, 1, 2, "x"), _num(r.ratio_to_lower_bound, 1, 2, "x"),
                      _num(r.predicted_step_time, 1e3, 2)] + peaks +
                     [_num(r.find_time_s, 1, 3), caps, _short(r.status)])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    fmt = lambda cells: "  ".join(str(c).ljust(w) if i in (0, len(cells) - 1) else str(c).rjust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(cells, widths)))
    lb = comparison.lower_bound
    footer = (f"lower bound {lb.value * 1e3:.2f} ms (critical path {lb.critical_path * 1e3:.2f} ms, "
              f"load {lb.load * 1e3:.2f} ms by {lb.load_method}); best single device: "
              f"{comparison.best_single or 'none'}" +
              (f" at {comparison.best_single_step_time * 1e3:.2f} ms" if comparison.best_single_step_time else ""))
    if comparison.learning:
        footer += "\n" + _learning_line(comparison.learning)
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(l) for l in lines] + ["", footer])


def _learning_line(worth: dict[str, Any]) -> str:
    """'learning is worth: learned X ms vs random search (N samples) Y ms, Z x' (Z = Y / X)."""
    learned, searched = worth["learned_step_time_s"] * 1e3, worth["random_search_step_time_s"] * 1e3
    return (f"learning is worth: learned {learned:.2f} ms vs random search ({worth['random_search_samples']} "
            f"samples) {searched:.2f} ms, {worth['ratio']:.2f}x")


def _num(value: float | None, scale: float, digits: int, suffix: str = "") -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value * scale:.{digits}f}{suffix}"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def write_outputs(comparison: Comparison, out_dir: str | Path, plot: bool = True) -> list[Path]:
    """compare.json, compare.csv and (with matplotlib) compare.png in `out_dir`; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "compare.json", out / "compare.csv"]
    paths[0].write_text(json.dumps(comparison.to_dict(), indent=2, default=_json_default) + "\n")
    columns = ["name", "placer", "step_time_s", "spread_s", "speedup_vs_best_single", "ratio_to_lower_bound",
               "predicted_step_time_s"] + [f"peak_memory_{d}" for d in comparison.devices] + \
              ["find_time_s", "respects_memory", "status"]
    with paths[1].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in comparison.rows:
            data = r.to_dict()
            writer.writerow({**{k: data.get(k) for k in columns if k in data},
                             **{f"peak_memory_{d}": data["peak_memory"].get(d) for d in comparison.devices}})
    for r in comparison.rows:
        if r.placement is not None:
            (out / "placements").mkdir(exist_ok=True)
            r.placement.save(out / "placements" / f"{r.name.replace(':', '_')}.json")
    if plot:
        try:
            paths.append(plot_bars(comparison, out / "compare.png"))
        except ImportError:
            log.warning("matplotlib is not installed, so no compare.png; pip install matplotlib for the chart")
    return paths


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def plot_bars(comparison: Comparison, path: Path) -> Path:
    """A bar per measured placement (IQR as error bar), lines at the lower bound and best single device."""
    import matplotlib

    matplotlib.use("Agg")   # files only, no display needed
    import matplotlib.pyplot as plt

    rows = [r for r in comparison.rows if r.step_time is not None]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(rows) + 2), 4.5))
    names = [r.name for r in rows]
    ax.bar(names, [r.step_time * 1e3 for r in rows],
           yerr=[(r.measurement.spread or 0.0) * 1e3 for r in rows], capsize=3,
           color=["tab:green" if r.placer == "learned" else "tab:grey" if r.placer == "single" else "tab:blue"
                  for r in rows])
    ax.axhline(comparison.lower_bound.value * 1e3, color="tab:red", linestyle="--", label="lower bound")
    if comparison.best_single_step_time:
        ax.axhline(comparison.best_single_step_time * 1e3, color="black", linestyle=":", label="best single device")
    ax.set_ylabel("step time (ms, median; bars: IQR)")
    ax.set_title(f"{Path(comparison.graph).name or 'graph'} on {', '.join(comparison.devices)}")
    ax.tick_params(axis="x", rotation=45)
    plt.setp(ax.get_xticklabels(), ha="right")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
