import csv
import json
import re

import pytest
from placer_testkit import random_dag

from placer.costmodel.simulator import AnalyticCostModel, SimulatedMeasurer, Simulator
from placer.placers import PLACERS
from placer.evaluate.report import format_table, write_outputs
from placer.evaluate.compare import CompareRow, baseline_rows, compare

DEVICES = ["cpu:0", "cpu:1"]


@pytest.fixture
def dag():
    return random_dag(30, seed=2)


def test_every_placement_is_set_against_the_best_single_device_and_the_bound(dag, tmp_path):
    speeds = {"cpu:0": 2e9, "cpu:1": 1e9}
    cost = AnalyticCostModel(DEVICES, speeds=speeds)
    # The "real" devices have far slower links than the cost model thinks: every split
    # placement measures slower than predicted, a single device exactly as predicted.
    slow = AnalyticCostModel(DEVICES, speeds=speeds, links={("cpu:0", "cpu:1"): (0.1, 1e6),
                                                            ("cpu:1", "cpu:0"): (0.1, 1e6)})
    rows = baseline_rows(dag, DEVICES, cost, {}, list(PLACERS))
    result = compare(dag, DEVICES, SimulatedMeasurer(dag, DEVICES, slow), cost, rows)
    assert [r.name for r in result.rows][:2] == ["single:cpu:0", "single:cpu:1"]
    assert result.best_single == "single:cpu:0"
    assert result.rows[0].speedup_vs_best_single == pytest.approx(1.0)
    step = lambda model, p: Simulator(dag, DEVICES, model).simulate(  # noqa: E731
        [DEVICES.index(p.nodes[n]) for n in dag.nodes]).step_time
    for row in result.rows:
        assert row.status == "ok" and row.find_time_s >= 0
        assert row.ratio_to_lower_bound >= 1 - 1e-9
        assert row.step_time == pytest.approx(step(slow, row.placement))          # the measurer's figure
        assert row.predicted_step_time == pytest.approx(step(cost, row.placement))
        assert row.speedup_vs_best_single == pytest.approx(result.best_single_step_time / row.step_time)
        split = len(set(row.placement.nodes.values())) > 1
        assert row.step_time > row.predicted_step_time * 1.01 if split else row.step_time == row.predicted_step_time
    assert sum(len(set(r.placement.nodes.values())) > 1 for r in result.rows) >= 5
    table = format_table(result)
    assert all(r.name in table for r in result.rows) and "lower bound" in table

    paths = write_outputs(result, tmp_path)
    with (tmp_path / "compare.csv").open() as f:
        assert [r["name"] for r in csv.DictReader(f)] == [r.name for r in result.rows]
    data = json.loads((tmp_path / "compare.json").read_text())
    assert data["format"] == "placer.compare/1" and len(data["rows"]) == len(result.rows)
    assert [(r["step_time_s"], r["predicted_step_time_s"]) for r in data["rows"]] == \
        [(r.step_time, r.predicted_step_time) for r in result.rows]
    assert (tmp_path / "compare.png") in paths and (tmp_path / "compare.png").stat().st_size > 1000


def test_a_placer_that_cannot_fit_the_caps_is_reported_not_measured(dag):
    cost = AnalyticCostModel(DEVICES)
    caps = {"cpu:0": 60_000, "cpu:1": 60_000}
    rows = baseline_rows(dag, DEVICES, cost, caps, ["memory_greedy", "random"])
    result = compare(dag, DEVICES, SimulatedMeasurer(dag, DEVICES, cost, caps), cost, rows, caps)
    greedy, rand = result.rows
    assert greedy.status.startswith("refused") and "mem=" in greedy.status and greedy.measurement is None
    assert rand.respects_memory is False and rand.measurement is not None
    assert "ignores" in format_table(result)


def test_compare_reports_what_learning_is_worth_against_random_search_at_its_samples(dag):
    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 1e9, "cpu:1": 1e9})
    rows = baseline_rows(dag, DEVICES, cost, {}, ["single", "random_search"],
                         options={"random_search": {"samples": 40}})
    searched = rows[-1]
    assert searched.placement.extra["placer"]["samples"] == 40
    learned = PLACERS["m_etf"].place(dag, DEVICES, cost)
    learned.extra = {"placer": {"name": "learned", "samples": 40}}
    rows.append(CompareRow("learned", "learned", None, 1.0, placement=learned))
    result = compare(dag, DEVICES, SimulatedMeasurer(dag, DEVICES, cost), cost, rows)
    worth = result.learning
    assert worth["random_search_samples"] == 40 and worth["learned_samples"] == 40
    assert worth["learned_step_time_s"] == rows[-1].step_time
    assert worth["random_search_step_time_s"] == searched.step_time
    assert worth["ratio"] == pytest.approx(searched.step_time / rows[-1].step_time)
    assert (f"learning is worth: learned, {rows[-1].step_time * 1e3:.2f} ms simulated vs random_search (40 samples), "
            f"{searched.step_time * 1e3:.2f} ms simulated: {worth['ratio']:.2f}x, the learned placement is faster") \
        in format_table(result)
    assert result.to_dict()["learning_vs_random_search"] == worth
    without = compare(dag, DEVICES, SimulatedMeasurer(dag, DEVICES, cost), cost, rows[:-1])
    assert without.learning is None and "learning is worth" not in format_table(without)


class DriftingMeasurer:
    """A real measurer's interface (`open` a placement, step it) over the simulator's times, on a
    machine whose speed drifts 2x over the rounds; `wobble`: each step's own noise (seeded)."""

    def __init__(self, dag, cost, wobble=0.002, seed=0, bias=None):
        self.devices = DEVICES
        self.sim = Simulator(dag, DEVICES, cost)
        self.dag = dag
        self.steps = 0
        self.rng = __import__("numpy").random.default_rng(seed)
        self.wobble = wobble
        self.bias = bias or {}   # placement's first node's device -> factor (a device that is off)

    def run_record(self):
        return {"objective": "inference"}

    def open(self, placement):
        base = self.sim.simulate([DEVICES.index(placement.nodes[n]) for n in self.dag.nodes]).step_time
        base *= placement.extra.get("slower_by", 1.0)   # a test's way to make one row slower than its placement
        measurer = self

        class Run:
            peak_memory = {}

            def step(self):
                measurer.steps += 1
                slowness = 1.0 + min(1.0, measurer.steps / 400)
                return base * slowness * (1 + measurer.rng.normal(0, measurer.wobble))

            def close(self):
                pass

        return Run()


def _real_rows(dag, cost):
    return baseline_rows(dag, DEVICES, cost, {}, ["single", "m_etf", "random"])


def test_a_real_comparison_runs_in_rounds_with_a_control_row_that_agrees_with_its_twin(dag):
    from placer.measure.rounds import RoundsProtocol

    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 2e9, "cpu:1": 1e9})
    said = []
    result = compare(dag, DEVICES, DriftingMeasurer(dag, cost), cost, _real_rows(dag, cost), progress=said.append,
                     rounds=RoundsProtocol(warmup=1, min_rounds=8, max_rounds=30), shortcut="--no-compare skips them")
    # the rounds say when they start, how long they may take and what shortens them; then a line at
    # most every 10 s (none here: the fake runs in no time)
    assert said == ["measuring 5 placements side by side: 8-30 interleaved rounds, at most 180 s "
                    "(--no-compare skips them)"]
    names = [r.name for r in result.rows]
    assert names == ["single:cpu:0", "single:cpu:1", "m_etf", "random", "control"]
    control = result.row("control")
    assert control.placer == "single:cpu:0" and control.placement.nodes == result.rows[0].placement.nodes
    assert result.control["twin"] == "single:cpu:0" and result.control["agrees"]
    assert result.rounds["rounds"] >= 8 and result.rounds["capped"] is None
    assert not any("noisy" in n for n in result.notes)
    # every speedup is paired, with an interval around the figure
    for row in result.rows:
        assert row.vs_best_single.n == result.rounds["rounds"] and row.vs_best_single.contains(row.vs_best_single.value)
    assert "control: single:cpu:0 measured twice" in format_table(result)
    # the headline: the best placer against the best single device, paired, with a verdict
    placers = [r for r in result.rows if r.placer in ("m_etf", "random")]
    best = max(placers, key=lambda r: r.vs_best_single.value)   # by paired speedup, not by median
    headline = {v["reference"]: v for v in result.verdicts}
    assert set(headline) == {"single:cpu:0"} and headline["single:cpu:0"]["subject"] == best.name
    s = best.vs_best_single
    expected = "faster" if s.low > 1.02 else "slower" if s.high < 1 / 1.02 else \
        "tied" if 1 / 1.02 <= s.low and s.high <= 1.02 else "not resolved"
    assert headline["single:cpu:0"]["verdict"] == expected
    assert (headline["single:cpu:0"]["to_resolve"] is not None) == (expected == "not resolved")
    assert f"{best.name} vs single:cpu:0 (the best single device)" in format_table(result)


def test_the_headline_is_the_runs_placement_against_the_baseline_fastest_by_paired_speedup():
    from placer.measure.intervals import Interval
    from placer.measure.measurement import Measurement
    from placer.evaluate.compare import headline_verdicts

    def row(name, placer, median):
        return CompareRow(name, placer, True, 0.0, measurement=Measurement(ok=True, step_time=median))

    single, a, b = row("single:cpu:0", "single", 0.20), row("a", "m_sct", 0.150), row("b", "m_etf", 0.155)
    learned, greedy = row("learned", "learned", 0.152), row("learned_greedy", "learned", 0.149)
    # b's median is the slower (it ran in slow minutes), its paired speedup over one device the larger
    paired = {("a", "single:cpu:0"): 1.30, ("b", "single:cpu:0"): 1.40, ("learned", "b"): 1.01,
              ("learned", "single:cpu:0"): 1.41}

    def speedup(r, ref):
        v = paired.get((r.name, ref.name), ref.step_time / r.step_time)
        return Interval(v, v * 0.995, v * 1.005, 20)

    verdicts = {v["reference"]: v for v in headline_verdicts([single, a, b, learned, greedy], speedup, single)}
    assert set(verdicts) == {"b", "single:cpu:0"}
    assert all(v["subject"] == "learned" for v in verdicts.values())   # placement.json, what `apply` takes
    assert verdicts["b"]["verdict"] == "tied" and verdicts["single:cpu:0"]["verdict"] == "faster"
    # 2.5% faster by its median, but its interval reaches inside the 2% band: not resolved, with the rounds it needs
    from placer.evaluate.report import _verdict_line

    paired[("learned", "b")] = 1.025
    close = next(v for v in headline_verdicts([single, a, b, learned, greedy], speedup, single) if v["reference"] == "b")
    assert close["verdict"] == "not resolved" and close["to_resolve"]["rounds"] > 20
    assert _verdict_line(close, "measured").startswith(
        "learned vs b (the best baseline placer): 1.02x [1.02, 1.03] measured, not resolved (")


def test_rows_within_the_noise_of_the_fastest_are_tied_and_others_are_not(dag):
    from placer.measure.rounds import RoundsProtocol
    from placer.placement import Placement

    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 1e9, "cpu:1": 1e9})
    rows = baseline_rows(dag, DEVICES, cost, {}, ["single"])
    same = rows[0].placement
    for name, factor in (("slower_by_5pct", 1.05), ("slower_by_0.2pct", 1.002), ("slower_by_2pct", 1.02)):
        slower = Placement(devices=DEVICES, nodes=same.nodes, graph_sha256=same.graph_sha256, extra={"slower_by": factor})
        rows.append(CompareRow(name, "learned", None, None, placement=slower))
    result = compare(dag, DEVICES, DriftingMeasurer(dag, cost, wobble=0.01), cost, rows,
                     rounds=RoundsProtocol(warmup=0, min_rounds=20, max_rounds=20))
    tied = {r.name for r in result.rows if r.tied_with_fastest}
    # two identical devices, the control and 0.2% slower: all within 1% noise of each other
    assert {"single:cpu:0", "single:cpu:1", "control", "slower_by_0.2pct"} <= tied
    assert "slower_by_5pct" not in tied and result.fastest != "slower_by_5pct"
    # 2% slower, on the band's edge: neither tied nor slower
    verdicts = {r.name: r.vs_fastest_verdict for r in result.rows}
    assert verdicts["slower_by_5pct"] == "slower" and verdicts["slower_by_2pct"] == "not resolved"
    table = format_table(result)
    assert "fastest" in table and "tied" in table


def test_a_control_that_disagrees_with_its_twin_is_reported_as_noise(dag):
    from placer.measure.rounds import RoundsProtocol

    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 2e9, "cpu:1": 1e9})
    measurer = DriftingMeasurer(dag, cost, wobble=0.15, seed=3)
    result = compare(dag, DEVICES, measurer, cost, _real_rows(dag, cost),
                     rounds=RoundsProtocol(warmup=0, min_rounds=6, max_rounds=8))
    assert result.rounds["capped"] == "rounds"
    assert not result.control["within_precision"]
    notes = " | ".join(result.notes)
    assert "noisy measurement: the control and single:cpu:0" in notes and "OMP_WAIT_POLICY=PASSIVE" in notes
    assert "stopped at the cap of 8 rounds" in notes


def test_the_exact_rows_proven_gap_is_in_the_table_the_json_and_the_csv(dag, tmp_path):
    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 2e9, "cpu:1": 1e9})
    rows = baseline_rows(dag, DEVICES, cost, {}, ["m_etf", "exact"])
    result = compare(dag, DEVICES, SimulatedMeasurer(dag, DEVICES, cost), cost, rows)
    gap = result.row("exact").placement.extra["placer"]["gap"]
    assert gap is not None and result.row("exact").proven_gap == gap and result.row("m_etf").proven_gap is None
    assert "proven gap" in format_table(result).splitlines()[0]
    write_outputs(result, tmp_path, plot=False)
    saved = {r["name"]: r for r in json.loads((tmp_path / "compare.json").read_text())["rows"]}
    assert saved["exact"]["proven_gap"] == gap
    with (tmp_path / "compare.csv").open() as f:
        assert {r["name"]: r["proven_gap"] for r in csv.DictReader(f)}["exact"] == str(gap)


# A figure in the summary: the row it belongs to, its step time as the table's column gives it, what it is.
FIGURE = re.compile(r"(?P<name>[\w:.#-]+)(?: \(\d+ samples\))?, (?P<ms>\d+\.\d\d(?: \[\d+\.\d, \d+\.\d\])?) ms"
                    r"(?P<word> simulated| measured)?")


def check_summary(lines: list[str], table: str, word: str) -> None:
    """The summary says what the table says: every figure is a row's step time as its column gives
    it, under the row's name, labelled `word`; every other line but the last (where the table is) is
    a line of the table's footer, word for word; the names it sets against each other are rows."""
    rows = [re.split(r"\s{2,}", line) for line in table.split("\n\n")[0].splitlines()[2:]]
    figures = {cells[0]: cells[1] for cells in rows}   # under the header and its rule, above the footer
    for line in lines[:-1]:
        found = list(FIGURE.finditer(line))
        for f in found:
            assert figures.get(f["name"]) == f["ms"], f"{f['name']}, {f['ms']} ms is not the table's: {line}"
            assert f["word"] == f" {word}", f"{f['name']}'s figure is not labelled {word}: {line}"
        if not line.startswith(("fastest: ", "use: ")):
            assert line in table, f"not the table's words: {line}"
        named = re.match(r"(\S+) vs (\S+) \(|use: the placement of (\S+?)(?:,| \(|$)", line)
        assert named is None or set(n for n in named.groups() if n) <= set(figures), f"not a row: {line}"
        assert found or named or line.startswith("control: "), f"a line with no row in it: {line}"


def test_the_summary_is_short_and_says_what_the_table_says(dag, tmp_path):
    """Every row the summary names is a row of the table, with the table's figure; at most 10 lines,
    every figure labelled as what it is."""
    from placer.evaluate.compare import learning_worth
    from placer.evaluate.report import SUMMARY_LINES, summary_lines

    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 2e9, "cpu:1": 1e9})
    rows = baseline_rows(dag, DEVICES, cost, {}, list(PLACERS))
    result = compare(dag, DEVICES, SimulatedMeasurer(dag, DEVICES, cost), cost, rows)
    result.learning = learning_worth(result.rows) or result.learning
    table = format_table(result)
    lines = summary_lines(result, tmp_path / "table.txt")
    assert 2 <= len(lines) <= SUMMARY_LINES and lines[-1].endswith(str(tmp_path / "table.txt"))
    assert lines[0].startswith(f"fastest: {result.fastest}, ") and lines[0].endswith(" ms simulated")
    check_summary(lines, table, "simulated")
    for v in result.verdicts:   # the verdicts as the table's footer words them
        assert any(l.startswith(f"{v['subject']} vs {v['reference']} (") for l in lines)


def test_a_measured_summary_says_what_to_use_with_the_tables_figures_and_labels(dag, tmp_path):
    """Measured in rounds, with a whole-model row that beats every placement: the summary names it
    as what to use, each figure with its interval as the table has it and labelled measured; the
    check fails on a summary whose labels are swapped."""
    from placer.evaluate.report import SUMMARY_LINES, summary_lines
    from placer.measure.rounds import RoundsProtocol

    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 2e9, "cpu:1": 1e9})
    measurer = DriftingMeasurer(dag, cost)
    rows = baseline_rows(dag, DEVICES, cost, {}, ["single", "m_etf", "random", "random_search"],
                         options={"random_search": {"samples": 20}})
    learned = PLACERS["m_etf"].place(dag, DEVICES, cost)
    learned.extra = {"placer": {"name": "learned", "samples": 20}}
    fast = rows[0].placement   # the whole model, twice as fast as cpu:0 alone: faster than every placement
    fast = type(fast)(devices=fast.devices, nodes=fast.nodes, graph_sha256=fast.graph_sha256, extra={"slower_by": 0.5})
    rows += [CompareRow("learned", "learned", None, 1.0, placement=learned),
             CompareRow("whole_machine", "whole_machine", None, None, opener=lambda: measurer.open(fast),
                        note="one device with all 2 threads")]
    result = compare(dag, DEVICES, measurer, cost, rows, rounds=RoundsProtocol(warmup=0, min_rounds=8, max_rounds=8))
    assert result.instead == ["whole_machine"] and result.fastest == "whole_machine"
    table, path = format_table(result), tmp_path / "table.txt"
    lines = summary_lines(result, path)
    assert len(lines) <= SUMMARY_LINES and lines[1].startswith("use: whole_machine instead of a placement")
    assert any(l.startswith("learning is worth: learned, ") for l in lines)
    assert any(l.startswith("learned vs whole_machine (one device with all 2 threads): ") for l in lines)
    check_summary(lines, table, "measured")
    # it fails when the summary is off: two rows' labels swapped, a figure labelled simulated
    swapped = [l.replace("whole_machine", "@").replace("m_etf", "whole_machine").replace("@", "m_etf") for l in lines]
    for broken in (swapped, [lines[0].replace("measured", "simulated"), *lines[1:]]):
        with pytest.raises(AssertionError):
            check_summary(broken, table, "measured")
    # without the whole-model row: the fastest placement is what to use, from its file
    result = compare(dag, DEVICES, measurer, cost, rows[:-1], rounds=RoundsProtocol(warmup=0, min_rounds=8, max_rounds=8))
    lines = summary_lines(result, path)
    best = min((r for r in result.rows if r.name != "control"), key=lambda r: r.step_time or float("inf"))
    assert lines[1].startswith(f"use: the placement of {best.name}") and lines[1].endswith(
        f"({tmp_path / 'placements' / best.name.replace(':', '_')}.json)")
    check_summary(lines, format_table(result), "measured")


@pytest.mark.parametrize("value, low, high", [(1.004, 0.995, 1.013), (1.01, 0.93, 1.09), (1.05, 1.04, 1.06),
                                              (0.95, 0.80, 1.12)], ids=["agrees", "imprecise", "off", "off-and-wide"])
def test_the_control_line_and_the_noise_note_say_the_same(value, low, high):
    """One verdict decides both: a control that agrees is never called a noisy difference, one that
    disagrees always is."""
    from types import SimpleNamespace

    from placer.evaluate.compare import _noise_note, control_check
    from placer.evaluate.report import control_line
    from placer.measure.intervals import Interval
    from placer.measure.measurement import Measurement

    rows = {name: CompareRow(name, placer, None, None, measurement=Measurement(ok=True, step_time=0.1))
            for name, placer in (("single:cpu:0", "single"), ("control", "single:cpu:0"))}
    check = control_check(SimpleNamespace(row=rows.get), lambda row, ref: Interval(value, low, high, 20), 0.02)
    line, note = control_line(check), _noise_note(check, 0.02) or ""
    if "agrees" in line:
        assert "differ" not in note and "noisy" not in note
        assert ("wider than" in line) == bool(note) == (check["verdict"] == "agrees, imprecise")
        assert not note or note.startswith("imprecise measurement: the control agrees with single:cpu:0 (the same placement) "
                                           "within 3%")
    else:
        assert "DISAGREES" in line and check["verdict"] == "disagrees"
        assert note.startswith(f"noisy measurement: the control and single:cpu:0 (the same placement) differ by "
                               f"{abs(value - 1):.1%}, beyond the 3%")
