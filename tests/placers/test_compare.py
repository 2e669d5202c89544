import csv
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.cli import main
from placer.measure.simulator import AnalyticCostModel, SimulatedMeasurer
from placer.placers import PLACERS
from placer.placers.compare import baseline_rows, compare, format_table, write_outputs

DEVICES = ["cpu:0", "cpu:1"]


@pytest.fixture
def dag():
    from placer_testkit import make_graph

    rng = np.random.default_rng(2)
    spec = [(f"n{i}", sorted({f"n{j}" for j in rng.integers(0, i, size=min(i, 2))}) if i else [],
             float(rng.uniform(1e7, 1e9))) for i in range(30)]
    return make_graph(spec, numel=10_000, params={f"n{i}": 4000 for i in range(30)})


def test_every_placement_is_set_against_the_best_single_device_and_the_bound(dag, tmp_path):
    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 2e9, "cpu:1": 1e9})
    rows = baseline_rows(dag, DEVICES, cost, {}, list(PLACERS))
    result = compare(dag, DEVICES, SimulatedMeasurer(dag, DEVICES, cost), cost, rows)
    assert [r.name for r in result.rows][:2] == ["single:cpu:0", "single:cpu:1"]
    assert result.best_single == "single:cpu:0"
    assert result.rows[0].speedup_vs_best_single == pytest.approx(1.0)
    for row in result.rows:
        assert row.status == "ok" and row.find_time_s >= 0
        assert row.ratio_to_lower_bound >= 1 - 1e-9
        assert row.predicted_step_time == pytest.approx(row.step_time)  # same simulator, same costs
    table = format_table(result)
    assert all(r.name in table for r in result.rows) and "lower bound" in table

    paths = write_outputs(result, tmp_path)
    with (tmp_path / "compare.csv").open() as f:
        assert [r["name"] for r in csv.DictReader(f)] == [r.name for r in result.rows]
    data = json.loads((tmp_path / "compare.json").read_text())
    assert data["format"] == "placer.compare/1" and len(data["rows"]) == len(result.rows)
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
    (run / "summary.json").write_text(json.dumps({"wall_time_s": 12.5}))

    out = tmp_path / "out"
    code = main(["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]",
                 "--warmup", "0", "--repeats", "1", "--out", str(out), "--include-rl", str(run), "--no-plot",
                 "--placers", "single,random,metis,m_etf,heft"])
    assert code == 0
    printed = capsys.readouterr().out
    for name in ("single:cpu:0", "single:cpu:1", "random", "metis", "m_etf", "heft", "learned", "lower bound"):
        assert name in printed
    rows = {r["name"]: r for r in json.loads((out / "compare.json").read_text())["rows"]}
    assert all(r["status"] == "ok" and r["step_time_s"] > 0 for r in rows.values())
    assert rows["learned"]["find_time_s"] == 12.5 and rows["learned"]["device_counts"] == {"cpu:0": 3, "cpu:1": 2}


def test_placer_compare_refuses_an_unknown_placer(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    assert main(["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]",
                 "--placers", "single,magic", "--warmup", "0", "--repeats", "1", "--out", str(tmp_path)]) == 2
    assert "unknown placer(s) magic" in capsys.readouterr().err
