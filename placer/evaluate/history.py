"""`compare`'s history: every measured comparison appended to a JSON lines file per graph and device
set, so that the next run can say which rows moved outside their interval of the previous run.

One run's intervals say nothing about the next run unless they hold the variation between runs
(issue 27: the whole machine read 0.720x [0.713, 0.739] of learned in one run and 0.835x [0.790,
0.848] in the next). Blocks put the variation of minutes and fresh builds into the interval
(`placer.measure.rounds`); the history checks that they did. A row is compared on its paired
speedup over the best single device (when that is the same device as before) and on its own step
time: a step time that moved while its speedup held is the machine's speed, not the placement's.

A paired speedup cancels the machine's speed; a step time does not, and a machine drifts between
runs more than inside one (one device read 113.4, 115.0 and 116.7 ms in three quiet runs, each
interval about +-1.5%). So each row's step-time interval is widened by the spread of the step
times of the recent runs in the history (`widen_step_times`, the run level of Kalibera and Jones),
and the history keeps each run's own interval beside it.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from placer.costmodel.profile_cache import default_cache_dir
from placer.evaluate.compare import Comparison
from placer.measure.intervals import Interval, format_interval, widen_by_runs

log = logging.getLogger(__name__)

FORMAT = "placer.compare-history/1"
# The earlier runs whose spread goes into a run's step-time intervals: enough runs for a spread, few
# enough to be the machine as it is now.
RUNS_FOR_SPREAD = 5
# A run whose own intervals were this many times as wide as this run's (median over rows) ran on a
# busy machine: its step times say how busy it was, not how runs vary, and stay out of the spread.
BUSY_WIDTH = 3.0


def default_history_dir() -> Path:
    """compare_history beside the profile cache: $PLACER_CACHE/compare_history, else ~/.cache/placer/compare_history."""
    return default_cache_dir().parent / "compare_history"


def history_path(comparison: Comparison, folder: str | Path) -> Path:
    """The file of this graph, device set, engine, objective and micro-batch count: rows measured
    another way are not the same figures."""
    protocol = comparison.info.get("protocol", {})
    what = {"graph_sha256": comparison.graph_sha256, "devices": sorted(comparison.devices),
            "engine": comparison.info.get("engine"), "objective": protocol.get("objective"),
            "micro_batches": comparison.micro_batches}
    key = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
    return Path(folder) / f"{key}.jsonl"


def entry(comparison: Comparison, when: datetime.datetime | None = None) -> dict[str, Any]:
    """What the history keeps of a run: when, and each measured row's step-time interval and its
    paired speedup over the best single device."""
    rows = {}
    for row in comparison.rows:
        m = row.measurement
        if row.step_time is None or m is None or not m.interval:
            continue
        rows[row.name] = {"step_time": m.interval, "within_run": m.interval.get("within_run", m.interval),
                          "placement": _placement_digest(row),
                          "speedup": row.vs_best_single.to_dict() if row.vs_best_single is not None else None}
    return {"format": FORMAT, "time": (when or datetime.datetime.now()).isoformat(timespec="seconds"),
            "graph": comparison.graph, "devices": comparison.devices, "reference": comparison.best_single,
            "rounds": comparison.rounds, "rows": rows}


def _placement_digest(row) -> str | None:
    """Which placement a row measured (None for rows that are not one, as the whole machine): a
    row named "learned" or "file:..." may hold another placement in another run."""
    if row.placement is None:
        return None
    return hashlib.sha256("\n".join(row.placement.key()).encode()).hexdigest()[:16]


def recorded_runs(path: Path) -> list[dict[str, Any]]:
    """Every run recorded in `path`, oldest first (an unreadable line is skipped)."""
    if not path.is_file():
        return []
    runs = []
    for line in path.read_text().splitlines():
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            log.warning("skipping an unreadable line of %s", path)
            continue
        if isinstance(data, dict) and data.get("format") == FORMAT:
            runs.append(data)
    return runs


def _typical_width(run: dict[str, Any]) -> float:
    """The median relative half-width of a run's own step-time intervals."""
    widths = [Interval.from_dict(r["within_run"] if "within_run" in r else r["step_time"]).relative_half_width
              for r in run["rows"].values()]
    return float(np.median(widths)) if widths else float("inf")


def step_time_spread(now: dict[str, Any], earlier: list[dict[str, Any]]) -> dict[str, Any]:
    """How much the rows' step times move from run to run, over run `now` and the `earlier` runs
    (`entry`s): the standard deviation of log step time pooled over rows ({"spread", "df"}), each
    row's own ({"rows": name -> sd}, for rows seen in at least two runs), the runs it counted, and
    the runs left out as busy (`BUSY_WIDTH`). A row's step times count only from runs that measured
    the same placement."""
    width = _typical_width(now)
    counted = [run for run in earlier if _typical_width(run) <= BUSY_WIDTH * width]
    squares, df, per_row = 0.0, 0, {}
    for name, row in now["rows"].items():
        logs = [np.log(row["step_time"]["value"])]
        for run in counted:
            old = run["rows"].get(name)
            if old is not None and old.get("placement") in (None, row["placement"]):
                logs.append(np.log(old["step_time"]["value"]))
        if len(logs) < 2:
            continue
        logs = np.asarray(logs)
        squares += float(((logs - logs.mean()) ** 2).sum())
        df += len(logs) - 1
        per_row[name] = float(logs.std(ddof=1))
    return {"spread": float(np.sqrt(squares / df)) if df else 0.0, "df": df, "rows": per_row,
            "runs": [run["time"] for run in counted], "left_out": [run["time"] for run in earlier if run not in counted]}


def widen_step_times(comparison: Comparison, spread: dict[str, Any]) -> None:
    """Widen each row's step-time interval in `comparison` by the spread between runs (the pooled
    one, or the row's own where it moved more: threads that spin vary more between runs than a
    placement does), keeping its own interval under "within_run"."""
    runs = len(spread["runs"]) + 1
    for row in comparison.rows:
        m = row.measurement
        if row.name not in spread["rows"] or m is None or not m.interval:
            continue
        within = {k: v for k, v in m.interval.items() if k != "within_run"}
        sd = max(spread["spread"], spread["rows"][row.name])
        widened = widen_by_runs(Interval.from_dict(within), sd, spread["df"], runs)
        m.interval = {**within, **widened.to_dict(), "within_run": within}


def moved_rows(now: dict[str, Any], before: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of run `now` whose interval does not overlap theirs in run `before` (both `entry`s):
    [{"row", "what": [{"figure", "now", "before"}]}]."""
    moved = []
    for name, row in now["rows"].items():
        old = before["rows"].get(name)
        if old is None:
            continue
        # a run's own interval against the other's: a row that moved outside it is the variation
        # between runs that the widened intervals hold
        figures = [("step time", row["within_run"], old.get("within_run", old["step_time"]))]
        if now["reference"] == before["reference"] and row["speedup"] and old["speedup"]:
            figures.append((f"speedup over {now['reference']}", row["speedup"], old["speedup"]))
        what = [{"figure": figure, "now": a, "before": b} for figure, a, b in figures
                if not Interval.from_dict(a).overlaps(Interval.from_dict(b))]
        if what:
            moved.append({"row": name, "what": what})
    return moved


def moved_note(moved: dict[str, Any], when: str) -> str:
    """'m_etf moved outside its interval of the previous run (2025-01-02T10:00:00): speedup over
    single:cpu:0 1.32x [1.28, 1.35], was 1.10x [1.08, 1.12]'."""
    said = "; ".join(f"{w['figure']} {_figure(w)}" for w in moved["what"])
    only_time = [w["figure"] for w in moved["what"]] == ["step time"]
    return (f"{moved['row']} moved outside its interval of the previous run ({when}): {said}"
            + ("; its speedup held, so the machine's speed moved" if only_time else ""))


def _figure(what: dict[str, Any]) -> str:
    if what["figure"] == "step time":
        ms = lambda i: f"{i['value'] * 1e3:.2f} ms [{i['low'] * 1e3:.2f}, {i['high'] * 1e3:.2f}]"  # noqa: E731
        return f"{ms(what['now'])}, was {ms(what['before'])}"
    return f"{format_interval(what['now'])}, was {format_interval(what['before'])}"


def check_and_record(comparison: Comparison, folder: str | Path) -> list[str]:
    """Widen `comparison`'s step-time intervals by the spread of the recent runs in `folder`'s
    history file for its graph and devices, set it against the previous run, then append it;
    returns a note per row that moved, and keeps what it found in `comparison.history`."""
    path = history_path(comparison, folder)
    runs = recorded_runs(path)
    before = runs[-1] if runs else None
    spread = step_time_spread(entry(comparison), runs[-RUNS_FOR_SPREAD:])
    widen_step_times(comparison, spread)
    now = entry(comparison)
    moved = moved_rows(now, before) if before is not None else []
    comparison.history = {"file": str(path), "previous_run": before["time"] if before else None, "moved": moved,
                          "between_runs": {k: spread[k] for k in ("spread", "df", "runs", "left_out")}}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(now) + "\n")
    return [moved_note(m, before["time"]) for m in moved]
