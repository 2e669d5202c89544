"""A training run names one best single device: its summary takes its closing comparison's."""

import pytest
from placer_testkit import random_dag

from placer.costmodel.simulator import AnalyticCostModel, SimulatedMeasurer
from placer.evaluate.compare import CompareRow, baseline_rows, compare
from placer.evaluate.report import format_table, summary_lines
from placer.evaluate.single_device import adopt_best_single
from placer.placers import PLACERS
from placer.policy.run_summary import speedup_text
from placer.policy.summary_file import RunSummary

DEVICES = ["cpu:0", "cpu:1"]


def _closing_comparison(dag):
    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 2e9, "cpu:1": 1e9})
    rows = baseline_rows(dag, DEVICES, cost, {}, ["single", "m_etf"])
    rows.append(CompareRow("learned", "learned", None, 1.0, placement=PLACERS["m_sct"].place(dag, DEVICES, cost)))
    return compare(dag, DEVICES, SimulatedMeasurer(dag, DEVICES, cost), cost, rows)


def _summary():
    """What the confirmation at the end of training said: minutes earlier, cpu:1 came out fastest."""
    return {"best_step_time": 0.5, "single_device_step_times": {"cpu:0": 0.61, "cpu:1": 0.60},
            "best_single_device": "cpu:1", "best_single_device_step_time": 0.60,
            "speedup_vs_best_single_device": 1.2, "vs_best_single_device": None}


@pytest.mark.parametrize("typed", [False, True], ids=["dict", "RunSummary"])
def test_the_run_summary_names_the_best_single_device_its_closing_comparison_names(typed):
    comparison = _closing_comparison(random_dag(30, seed=2))
    assert comparison.best_single == "single:cpu:0"
    summary = adopt_best_single(RunSummary.from_dict(_summary(), "seq2seq") if typed else _summary(), comparison)
    assert summary["best_single_device"] == "cpu:0"
    assert summary["best_single_device_step_time"] == comparison.best_single_step_time
    assert summary["single_device_step_times"] == {d: comparison.row(f"single:{d}").step_time for d in DEVICES}
    # the line training prints, the table's footer and the summary's verdict name the same device and figure
    learned = comparison.row("learned")
    said = speedup_text(summary)
    assert said.startswith("speedup over the best single device (cpu:0): ")
    assert "best single device: single:cpu:0 at" in format_table(comparison)
    verdict = next(line for line in summary_lines(comparison) if line.startswith("learned vs single:cpu:0 ("))
    figure = said.split(": ", 1)[1].split(",")[0]
    assert figure == verdict.split(": ", 1)[1].split(" simulated")[0]
    assert summary["speedup_vs_best_single_device"] == learned.speedup_vs_best_single


def test_without_a_closing_comparison_the_summary_keeps_its_own():
    assert adopt_best_single(_summary(), None) == _summary()
