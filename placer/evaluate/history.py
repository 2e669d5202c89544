"""`compare`'s history: every measured comparison appended to a JSON lines file per graph and device
set, so that the next run can say which rows moved outside their interval of the previous run.

One run's intervals say nothing about the next run unless they hold the variation between runs
(issue 27: the whole machine read 0.720x [0.713, 0.739] of learned in one run and 0.835x [0.790,
0.848] in the next). Blocks put that variation into the interval (`placer.measure.rounds`); the
history checks that they did. A row is compared on its paired speedup over the best single device
(when that is the same device as before) and on its own step time: a step time that moved while its
speedup held is the machine's speed, not the placement's.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from placer.costmodel.profile_cache import default_cache_dir
from placer.evaluate.compare import Comparison
from placer.measure.intervals import Interval, format_interval

log = logging.getLogger(__name__)

FORMAT = "placer.compare-history/1"


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
        rows[row.name] = {"step_time": m.interval,
                          "speedup": row.vs_best_single.to_dict() if row.vs_best_single is not None else None}
    return {"format": FORMAT, "time": (when or datetime.datetime.now()).isoformat(timespec="seconds"),
            "graph": comparison.graph, "devices": comparison.devices, "reference": comparison.best_single,
            "rounds": comparison.rounds, "rows": rows}


def previous(path: Path) -> dict[str, Any] | None:
    """The last run recorded in `path` (None when there is none; an unreadable line is skipped)."""
    if not path.is_file():
        return None
    for line in reversed(path.read_text().splitlines()):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            log.warning("skipping an unreadable line of %s", path)
            continue
        if isinstance(data, dict) and data.get("format") == FORMAT:
            return data
    return None


def moved_rows(now: dict[str, Any], before: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of run `now` whose interval does not overlap theirs in run `before` (both `entry`s):
    [{"row", "what": [{"figure", "now", "before"}]}]."""
    moved = []
    for name, row in now["rows"].items():
        old = before["rows"].get(name)
        if old is None:
            continue
        figures = [("step time", row["step_time"], old["step_time"])]
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
    """Set `comparison` against the previous run in `folder`'s history file for its graph and
    devices, then append it; returns a note per row that moved, and keeps what it found in
    `comparison.history`."""
    path = history_path(comparison, folder)
    now = entry(comparison)
    before = previous(path)
    moved = moved_rows(now, before) if before is not None else []
    comparison.history = {"file": str(path), "previous_run": before["time"] if before else None, "moved": moved}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(now) + "\n")
    return [moved_note(m, before["time"]) for m in moved]
