"""`compare`'s history: a run is set against the previous run of the same graph and device set, and
each row whose interval moved outside its interval then is named."""

from __future__ import annotations

import json

from placer.costmodel.lower_bound import LowerBound
from placer.evaluate.compare import CompareRow, Comparison
from placer.evaluate.history import check_and_record, history_path
from placer.evaluate.report import format_table
from placer.measure.intervals import Interval
from placer.measure.measurement import Measurement

DEVICES = ["cpu:0", "cpu:1"]


def _row(name: str, step: float, speedup: float | None, width: float = 0.01) -> CompareRow:
    """A measured row: its step time (s) and its speedup over single:cpu:0, each +-`width`."""
    interval = Interval(step, step * (1 - width), step * (1 + width), 20).to_dict()
    row = CompareRow(name, name, True, 0.0, measurement=Measurement(ok=True, step_time=step, interval=interval))
    if speedup is not None:
        row.vs_best_single = Interval(speedup, speedup * (1 - width), speedup * (1 + width), 20)
    return row


def _comparison(rows: dict[str, tuple[float, float]], devices=DEVICES, best="single:cpu:0") -> Comparison:
    return Comparison(graph="g.onnx", graph_sha256="abc", devices=list(devices), caps={},
                      lower_bound=LowerBound(0.01, 0.01, 0.01, "lp"), best_single=best,
                      rows=[_row(name, step, speedup) for name, (step, speedup) in rows.items()],
                      info={"engine": "torch", "protocol": {"objective": "inference"}},
                      rounds={"rounds": 20, "blocks": 1, "capped": None, "seconds": 1.0})


BASE = {"single:cpu:0": (0.200, 1.0), "m_etf": (0.150, 1.33), "whole_machine": (0.120, 1.67)}


def test_the_first_run_has_nothing_to_compare_and_starts_the_history(tmp_path):
    first = _comparison(BASE)
    assert check_and_record(first, tmp_path) == []
    assert first.history["previous_run"] is None and first.history["moved"] == []
    lines = history_path(first, tmp_path).read_text().splitlines()
    assert len(lines) == 1 and set(json.loads(lines[0])["rows"]) == set(BASE)


def test_a_row_whose_interval_moved_is_named_and_the_others_are_not(tmp_path):
    check_and_record(_comparison(BASE), tmp_path)
    same = _comparison(BASE)
    assert check_and_record(same, tmp_path) == [] and same.history["previous_run"] is not None
    assert "every row's interval overlaps" in format_table(same)
    # the whole machine's speedup moves by 15% (issue 27): outside its interval of the run before
    moved = _comparison({**BASE, "whole_machine": (0.138, 1.45)})
    notes = check_and_record(moved, tmp_path)
    assert len(notes) == 1 and notes[0].startswith("whole_machine moved outside its interval of the previous run")
    assert "speedup over single:cpu:0 1.45x [1.44, 1.46], was 1.67x [1.65, 1.69]" in notes[0]
    assert [m["row"] for m in moved.history["moved"]] == ["whole_machine"]
    assert "1 row(s) moved outside their interval" in format_table(moved)
    assert len(history_path(moved, tmp_path).read_text().splitlines()) == 3   # every run is kept


def test_a_step_time_that_moved_while_its_speedup_held_is_the_machine(tmp_path):
    check_and_record(_comparison(BASE), tmp_path)
    slower_machine = {name: (step * 1.2, speedup) for name, (step, speedup) in BASE.items()}
    notes = check_and_record(_comparison(slower_machine), tmp_path)
    assert len(notes) == 3 and all("its speedup held, so the machine's speed moved" in n for n in notes)


def test_runs_are_kept_per_graph_and_device_set_and_speedups_only_over_the_same_device(tmp_path):
    check_and_record(_comparison(BASE), tmp_path)
    other = _comparison({**BASE, "m_etf": (0.150, 1.0)}, devices=["cpu:0", "cpu:2"])
    assert check_and_record(other, tmp_path) == [] and other.history["previous_run"] is None
    assert history_path(other, tmp_path) != history_path(_comparison(BASE), tmp_path)
    # against another best single device, speedups are not the same figure: only step times count
    rebased = _comparison({**BASE, "m_etf": (0.150, 1.0)}, best="single:cpu:1")
    assert check_and_record(rebased, tmp_path) == []


def test_an_unreadable_line_is_skipped(tmp_path):
    first = _comparison(BASE)
    check_and_record(first, tmp_path)
    with history_path(first, tmp_path).open("a") as f:
        f.write("{not json\n")
    moved = _comparison({**BASE, "m_etf": (0.150, 1.10)})
    assert [n.split()[0] for n in check_and_record(moved, tmp_path)] == ["m_etf"]


def _reported(comparison: Comparison, name: str) -> Interval:
    return Interval.from_dict(comparison.row(name).measurement.interval)


def test_step_time_intervals_hold_a_machine_that_drifts_between_runs(tmp_path):
    # the three quiet runs of issue 27: the machine slowed 1.4% a run, each run's own interval
    # +-0.5%, so run 1's and run 3's own intervals miss each other by far
    runs = []
    for k in range(3):
        drift = 1.014 ** k
        run = Comparison(**{**_comparison(BASE).__dict__, "rows": [
            _row(name, step * drift, speedup, width=0.005) for name, (step, speedup) in BASE.items()]})
        check_and_record(run, tmp_path)
        runs.append(run)
    assert not _reported(runs[0], "m_etf").overlaps(Interval.from_dict(
        runs[2].row("m_etf").measurement.interval["within_run"]))
    for name in BASE:
        for a in range(3):
            for b in range(a + 1, 3):
                assert _reported(runs[a], name).overlaps(_reported(runs[b], name)), (name, a, b)
    assert runs[0].history["between_runs"]["df"] == 0 and _reported(runs[0], "m_etf").runs == 1
    assert runs[2].history["between_runs"]["df"] == 6 and _reported(runs[2], "m_etf").runs == 3
    assert "step-time intervals hold the variation between runs" in format_table(runs[2])
    # the history keeps each run's own interval, and a row moved against that one
    kept = json.loads(history_path(runs[2], tmp_path).read_text().splitlines()[-1])["rows"]["m_etf"]
    assert kept["within_run"]["high"] < kept["step_time"]["high"]


def test_a_busy_run_and_another_placement_stay_out_of_the_spread(tmp_path):
    busy = Comparison(**{**_comparison(BASE).__dict__, "rows": [
        _row(name, step * 1.5, speedup, width=0.30) for name, (step, speedup) in BASE.items()]})
    check_and_record(busy, tmp_path)
    quiet = _comparison(BASE)
    check_and_record(quiet, tmp_path)
    busy_time = json.loads(history_path(busy, tmp_path).read_text().splitlines()[0])["time"]
    assert quiet.history["between_runs"]["left_out"] == [busy_time]
    assert quiet.history["between_runs"]["df"] == 0 and _reported(quiet, "m_etf").high == 0.150 * 1.01
    # a row of the same name that measured another placement is not the same figure
    from placer.placement import Placement
    first = _comparison(BASE)
    first.row("m_etf").placement = Placement(["cpu:0", "cpu:1"], {"a": "cpu:0", "b": "cpu:1"})
    check_and_record(first, tmp_path / "other")
    second = _comparison({**BASE, "m_etf": (0.300, 0.67)})
    second.row("m_etf").placement = Placement(["cpu:0", "cpu:1"], {"a": "cpu:1", "b": "cpu:1"})
    check_and_record(second, tmp_path / "other")
    assert second.history["between_runs"]["df"] == 2   # the two other rows only
    assert _reported(second, "m_etf").high < 0.300 * 1.02
