"""`placer compare`'s output: the comparison as a text table and as a summary of at most ten lines,
compare.json, compare.csv, one placement file per row and a bar chart compare.png (matplotlib)."""

from __future__ import annotations

import csv
import json
import logging
import math
from collections import Counter
from pathlib import Path
from typing import Any

from placer.measure.intervals import RESOLUTION, Interval, format_interval, format_ratio, verdict_words
from placer.evaluate.compare import (AGREES, CONTROL_TOLERANCE, DISAGREES, IMPRECISE, Comparison, best_placement,
                                     control_verdict)

log = logging.getLogger(__name__)


def format_table(comparison: Comparison) -> str:
    """The comparison as a fixed-width text table (times in ms, memory in MiB), then what it says:
    the rounds, the control check, what learning is worth, and notes."""
    devices = comparison.devices
    has_whole = comparison.row("whole_machine") is not None and comparison.row("whole_machine").step_time
    pipelined = comparison.micro_batches > 1
    gaps = any(r.proven_gap is not None for r in comparison.rows)   # the exact solver's, when it proved one
    head = ["placement", "step ms [95%]"] + (["micro-batches/s"] if pipelined else []) + ["vs best 1-dev [95%]"] + \
           (["vs whole machine"] if has_whole else []) + \
           ["vs fastest", "/ bound", "predicted"] + (["proven gap"] if gaps else []) + \
           [f"peak {d} MiB" for d in devices] + ["find s", "caps", "status"]
    lines = []
    for r in comparison.rows:
        m = r.measurement
        peaks = [f"{m.peak_memory[d] / 2**20:.1f}" if m is not None and d in m.peak_memory else "-" for d in devices]
        caps = "-" if not comparison.caps or r.respects_memory is None else \
            ("respects" if r.respects_memory else "ignores")
        tied = "-" if r.step_time is None else ("fastest" if r.name == comparison.fastest
                                                else r.vs_fastest_verdict or "")
        lines.append([r.name, _row_time(r)] +
                     ([_num(comparison.throughput(r), 1, 1)] if pipelined else []) + [format_interval(r.vs_best_single)] + ([format_interval(r.vs_whole_machine)] if has_whole else []) +
                     [tied, _num(r.ratio_to_lower_bound, 1, 2, "x"), _num(r.predicted_step_time, 1e3, 2)] +
                     ([_num(r.proven_gap, 100, 1, "%")] if gaps else []) + peaks +
                     [_num(r.find_time_s, 1, 3), caps, _short(r.status)])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    fmt = lambda cells: "  ".join(str(c).ljust(w) if i in (0, len(cells) - 1) else str(c).rjust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(cells, widths)))
    lb = comparison.lower_bound
    of_placements = " of placements (a plan that splits ops is not bounded by it)" if any(
        r.plan for r in comparison.rows) else ""
    footer = [f"lower bound{of_placements} {lb.value * 1e3:.2f} ms (critical path {lb.critical_path * 1e3:.2f} ms, "
              f"with transfers {lb.transfer_path * 1e3:.2f} ms, load {lb.load * 1e3:.2f} ms by {lb.load_method}"
              f"{' within the memory caps' if lb.caps_used else ''}); best single device: "
              f"{comparison.best_single or 'none'}" +
              (f" at {comparison.best_single_step_time * 1e3:.2f} ms" if comparison.best_single_step_time else "")]
    pb = comparison.plan_bound
    if pb is not None:
        footer.append(f"lower bound of plans {pb.value * 1e3:.2f} ms (every op split over the devices at best: "
                      f"critical path {pb.critical_path * 1e3:.2f} ms, load {pb.load * 1e3:.2f} ms by "
                      f"{pb.load_method}{' within the memory caps' if pb.caps_used else ''}, both at once "
                      f"{pb.path_energy * 1e3:.2f} ms); "
                      "plan rows' / bound is of it")
    if comparison.rounds:
        r = comparison.rounds
        blocks = r.get("blocks", 1)
        footer.append((f"measured in {blocks} blocks of interleaved rounds ({r['rounds']} rounds, "
                       f"{r['seconds']:.0f} s), every placement built afresh in each block" if blocks > 1 else
                       f"measured in {r['rounds']} interleaved rounds ({r['seconds']:.0f} s)")
                      + ", every placement once a round in a shuffled order; intervals are 95%"
                      + (", over blocks and rounds" if blocks > 1 else "")
                      + f"; a verdict is faster or slower when its whole interval lies beyond {RESOLUTION:.0%}, tied "
                      f"when it lies within, else not resolved"
                      + (f"; stopped at the {r['capped']} cap" if r["capped"] else ""))
    if comparison.control:
        c = comparison.control
        footer.append(control_line(c))
    word = figures_word(comparison)
    footer += [_verdict_line(v, word) for v in comparison.verdicts]
    if comparison.learning:
        footer.append(_learning_line(comparison, word))
    protocol = comparison.info.get("protocol", {})
    if pipelined:
        footer.append(f"step = {comparison.micro_batches} micro-batches pipelined through the placement "
                      "(the model is the per-micro-batch graph)")
    if comparison.info.get("engine") == "onnxruntime":
        footer.append("every row ran in ONNX Runtime (the onnxruntime engine: one session per device partition)")
    if protocol.get("objective") == "training":
        footer.append(f"step = training step (forward, loss {protocol.get('loss')}, backward, "
                      f"{protocol.get('optimizer')} update)")
    if comparison.history and comparison.history["previous_run"]:
        moved = len(comparison.history["moved"])
        footer.append(f"against the previous run ({comparison.history['previous_run']}): "
                      + (f"{moved} row(s) moved outside their interval, see the notes" if moved
                         else "every row's interval overlaps its interval then"))
    between = (comparison.history or {}).get("between_runs")
    if between and between["df"]:
        left_out = f"; {len(between['left_out'])} busy run(s) left out" if between["left_out"] else ""
        footer.append(f"step-time intervals hold the variation between runs: {between['spread']:.1%} from run to "
                      f"run over this and {len(between['runs'])} earlier run(s) in the history{left_out}")
    footer += [f"note: {n}" for n in comparison.notes]
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(l) for l in lines] + [""] + footer)


def control_line(control: dict[str, Any]) -> str:
    """'control: single:cpu:0 measured twice, ratio 1.004 [0.991, 1.017]: agrees (within 3% asked)',
    in the words of its verdict (`control_verdict`), which the noise note reads too."""
    r, verdict = control["ratio"], control_verdict(control)
    said = f"{'DISAGREES' if verdict == DISAGREES else 'agrees'} (within {CONTROL_TOLERANCE:.0%} asked)"
    if verdict == IMPRECISE:
        said += f", but its interval is wider than the +-{control['precision']:.0%} asked"
    return f"control: {control['twin']} measured twice, ratio {r['value']:.3f} [{r['low']:.3f}, {r['high']:.3f}]: {said}"


SUMMARY_LINES = 10
TABLE = "table.txt"   # the whole table, in the output folder beside compare.json


def summary_lines(comparison: Comparison, table: str | Path | None = None) -> list[str]:
    """What a comparison says, in at most `SUMMARY_LINES` lines, each figure as the table gives it
    (same row names, same rounding) and labelled simulated or measured: the fastest row, what to
    use (a placement, or a whole-model row that beats them all), the headline verdicts with their
    intervals, what learning is worth, the control when it is not clean, and where the whole
    table (`table`) is."""
    word = figures_word(comparison)
    lines = []
    fastest = comparison.row(comparison.fastest) if comparison.fastest else None
    if fastest is not None:
        lines.append(f"fastest: {fastest.name}, {_row_time(fastest)} ms {word}")
    use = _use_line(comparison, word, Path(table).parent if table is not None else None)
    lines += [use] if use else []
    lines += [_verdict_line(v, word) for v in comparison.verdicts]
    if comparison.learning:
        lines.append(_learning_line(comparison, word))
    if comparison.control and control_verdict(comparison.control) != AGREES:
        lines.append(control_line(comparison.control))
    lines = lines[:SUMMARY_LINES - 1]
    if table is not None:
        lines.append(f"the whole table (every row, peak memory, the notes): {table}")
    return lines


def nothing_ran(comparison: Comparison, table: str | Path) -> str | None:
    """The one line a comparison ends with when no row ran (each failed or was refused, most often
    for memory): what failed and what to do; None when a row ran."""
    if any(r.step_time is not None for r in comparison.rows):
        return None
    failures = Counter(r.status.split(":")[0] for r in comparison.rows)
    commonest = ", ".join(f"{n} {what}" for what, n in failures.most_common(3))
    return (f"no placement or plan ran: all {len(comparison.rows)} rows failed ({commonest}); raise the devices' "
            f"memory (mem= caps, or a cluster with more), add devices, or lower the batch; each row's reason is in "
            f"{table}")


def closing_lines(comparison: Comparison, table: str | Path, verbose: bool = False) -> list[str]:
    """What a command that compared prints last: the whole table with `verbose` (placer -v), then
    the summary; the table itself is in the output folder (`write_outputs`)."""
    return ([format_table(comparison), ""] if verbose else []) + summary_lines(comparison, table)


def figures_word(comparison: Comparison) -> str:
    """'simulated' or 'measured': what every figure of `comparison` is."""
    return "simulated" if comparison.info.get("simulated") or comparison.rounds is None else "measured"


def _use_line(comparison: Comparison, word: str, out: Path | None) -> str | None:
    """'use: ...': a whole-model row where it beats every placement beyond the noise, else the
    fastest placement (with its file in `out`, when saved there)."""
    best = best_placement(comparison)
    if best is None:
        return None
    if comparison.instead:
        row = comparison.row(comparison.instead[0])
        where = f", {placement_file(out, row.name)}" if out is not None and row.split_plan is not None else ""
        return (f"use: {row.name}{_figure(comparison, row, word)}{where} instead of a placement: faster than every "
                f"one, the best of them {best.name}, {_row_time(best)} ms {word} ({row.name}: {row.note})")
    where = f" ({placement_file(out, best.name)})" if out is not None and best.placement is not None else ""
    return f"use: the placement of {best.name}{_figure(comparison, best, word)}{where}"


def _figure(comparison: Comparison, row, word: str) -> str:
    """', 12.34 [12.1, 12.5] ms measured', or nothing for the fastest row (its line has said it)."""
    return "" if row.name == comparison.fastest else f", {_row_time(row)} ms {word}"


def placement_file(out: str | Path, name: str) -> Path:
    """Where `write_outputs` saves row `name`'s placement in folder `out`."""
    return Path(out) / "placements" / f"{name.replace(':', '_')}.json"


def _row_time(row) -> str:
    """A row's step time as the table's column gives it: '12.34 [12.1, 12.5]' (ms)."""
    m = row.measurement
    return _with_interval(row.step_time, m.interval if m is not None else None)


def _with_interval(seconds: float | None, interval: dict | None) -> str:
    """'123.45 [121.0, 125.2]' (ms), or the time alone when there is no interval."""
    if seconds is None:
        return "-"
    if not interval or interval["n"] < 2:
        return f"{seconds * 1e3:.2f}"
    return f"{seconds * 1e3:.2f} [{interval['low'] * 1e3:.1f}, {interval['high'] * 1e3:.1f}]"


def _verdict_line(v: dict[str, Any], word: str) -> str:
    """'learned vs m_sct (the best baseline placer): 1.01x [1.00, 1.02] measured, tied (within 2%)'."""
    i = v["speedup"]
    said = verdict_words(Interval.from_dict(i))
    return f"{v['subject']} vs {v['reference']} ({v['what']}): {format_interval(i)} {word}, {said}"


def _learning_line(comparison: Comparison, word: str) -> str:
    """'learning is worth: learned_greedy, 12.00 ms measured vs random_search (N samples), 12.60 ms
    measured: 1.05x [1.02, 1.08], the learned placement is faster' (the rows as the table has them)."""
    worth = comparison.learning
    learned = comparison.row(worth["learned"])
    searched = next(r for r in comparison.rows if r.placer == "random_search" and r.step_time is not None)
    interval = worth.get("interval")
    figure = format_interval(interval) if interval and interval["n"] >= 2 else format_ratio(worth["ratio"])
    said = {"faster": "the learned placement is faster", "slower": "random search is faster"}.get(
        worth.get("verdict"), verdict_words(Interval.from_dict(interval)) if interval else worth.get("verdict", ""))
    return (f"learning is worth: {learned.name}, {_row_time(learned)} ms {word} vs {searched.name} "
            f"({worth['random_search_samples']} samples), {_row_time(searched)} ms {word}: {figure}"
            + (f", {said}" if said else ""))


def _num(value: float | None, scale: float, digits: int, suffix: str = "") -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value * scale:.{digits}f}{suffix}"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def write_outputs(comparison: Comparison, out_dir: str | Path, plot: bool = True) -> list[Path]:
    """compare.json, compare.csv, the whole text table (`TABLE`) and (with matplotlib) compare.png
    in `out_dir`; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "compare.json", out / "compare.csv", out / TABLE]
    paths[0].write_text(comparison_json(comparison))
    paths[2].write_text(format_table(comparison) + "\n")
    columns = ["name", "placer", "step_time_s", "spread_s", "speedup_vs_best_single", "vs_fastest_verdict",
               "tied_with_fastest",
               "ratio_to_lower_bound",
               "predicted_step_time_s", "proven_gap"] + [f"peak_memory_{d}" for d in comparison.devices] + \
              ["find_time_s", "respects_memory", "status"]
    with paths[1].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in comparison.rows:
            data = r.to_dict()
            writer.writerow({**{k: data.get(k) for k in columns if k in data},
                             **{f"peak_memory_{d}": data["peak_memory"].get(d) for d in comparison.devices}})
    for r in comparison.rows:
        saved = r.placement if r.placement is not None else r.split_plan
        if saved is not None:   # a plan row's plan.json reads where a placement's does (`placer apply`)
            (out / "placements").mkdir(exist_ok=True)
            saved.save(placement_file(out, r.name))
    if plot:
        try:
            paths.append(plot_bars(comparison, out / "compare.png"))
        except ImportError:
            log.warning("matplotlib is not installed, so no compare.png; pip install matplotlib for the chart")
    return paths


def comparison_json(comparison: Comparison) -> str:
    """What compare.json holds (format placer.compare/1), ending in a newline."""
    return json.dumps(comparison.to_dict(), indent=2, default=_json_default) + "\n"


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
