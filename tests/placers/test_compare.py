import csv
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from placer_testkit import random_dag

from placer.cli import main
from placer.measure.simulator import AnalyticCostModel, SimulatedMeasurer, Simulator
from placer.placers import PLACERS
from placer.placers.compare import CompareRow, baseline_rows, compare, format_table, write_outputs

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
    assert (f"learning is worth: learned {rows[-1].step_time * 1e3:.2f} ms vs random search (40 samples) "
            f"{searched.step_time * 1e3:.2f} ms, {worth['ratio']:.2f}x") in format_table(result)
    assert result.to_dict()["learning_vs_random_search"] == worth
    without = compare(dag, DEVICES, SimulatedMeasurer(dag, DEVICES, cost), cost, rows[:-1])
    assert without.learning is None and "learning is worth" not in format_table(without)


def _tiny_model_file(path):
    rng = np.random.default_rng(0)
    w = lambda name, *shape: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)  # noqa: E731
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], name="conv_a"),
             helper.make_node("Relu", ["a"], ["ar"], name="relu_a"),
             helper.make_node("Conv", ["x", "w2"], ["b"], pads=[1, 1, 1, 1], name="conv_b"),
             helper.make_node("Sigmoid", ["b"], ["bs"], name="sig_b"),
             helper.make_node("Add", ["ar", "bs"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
                              initializer=[w("w1", 8, 3, 3, 3), w("w2", 8, 3, 3, 3)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_placer_compare_measures_the_baselines_and_a_learned_placement_for_real(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    from placer.graph.load import load_graph
    from placer.placement import Placement

    graph = load_graph(model)
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    nodes = {n: ("cpu:1" if n.endswith("_b") else "cpu:0") for n in graph.nodes}
    Placement(DEVICES, nodes, graph.sha256).save(run / "placement.json")
    (run / "summary.json").write_text(json.dumps({"wall_time_s": 12.5, "samples": 12, "groups": 2,
                                                  "grouping": "partition"}))

    out = tmp_path / "out"
    code = main(["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]",
                 "--warmup", "0", "--repeats", "1", "--out", str(out), "--include-rl", str(run), "--no-plot",
                 "--placers", "single,random,metis,m_etf,heft,random_search"])
    assert code == 0
    printed = capsys.readouterr().out
    for name in ("single:cpu:0", "single:cpu:1", "random", "metis", "m_etf", "heft", "random_search", "learned",
                 "lower bound", "learning is worth: learned", "vs random search (12 samples)"):
        assert name in printed
    data = json.loads((out / "compare.json").read_text())
    rows = {r["name"]: r for r in data["rows"]}
    assert all(r["status"] == "ok" and r["step_time_s"] > 0 for r in rows.values())
    assert rows["learned"]["find_time_s"] == 12.5 and rows["learned"]["device_counts"] == {"cpu:0": 3, "cpu:1": 2}
    # random_search drew as many placements as the learner, in the learner's groups.
    searched = Placement.load(out / "placements" / "random_search.json").extra["placer"]
    assert searched["samples"] == 12 and searched["groups"] == 2
    worth = data["learning_vs_random_search"]
    assert worth["learned_step_time_s"] == rows["learned"]["step_time_s"]
    assert worth["learned_samples"] == worth["random_search_samples"] == 12
    assert worth["ratio"] == pytest.approx(rows["random_search"]["step_time_s"] / rows["learned"]["step_time_s"])


def test_placer_compare_runs_random_search_with_the_samples_asked_for(tmp_path, monkeypatch, capsys):
    from placer.placement import Placement

    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    out = tmp_path / "out"
    assert main(["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--warmup", "0",
                 "--repeats", "1", "--out", str(out), "--no-plot", "--placers", "single,random_search",
                 "--samples", "9"]) == 0
    assert "random_search" in capsys.readouterr().out
    rows = {r["name"]: r for r in json.loads((out / "compare.json").read_text())["rows"]}
    assert rows["random_search"]["status"] == "ok" and rows["random_search"]["predicted_step_time_s"] > 0
    assert Placement.load(out / "placements" / "random_search.json").extra["placer"]["samples"] == 9
    assert main(["compare", "--graph", str(model), "--samples", "0", "--out", str(out)]) == 2
    assert "--samples must be at least 1" in capsys.readouterr().err


def test_placer_compare_refuses_an_unknown_placer(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    assert main(["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]",
                 "--placers", "single,magic", "--warmup", "0", "--repeats", "1", "--out", str(tmp_path)]) == 2
    assert "unknown placer(s) magic" in capsys.readouterr().err
