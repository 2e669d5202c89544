"""--cluster: placing for described hardware in the simulator, and nothing real on hardware this
machine does not have."""

from __future__ import annotations

import json

from placer.cli import main

from .test_compare import _tiny_model_file


def test_compare_on_a_described_cluster_is_simulated_and_says_so(tmp_path, capsys):
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    out = tmp_path / "out"
    code = main(["compare", "--graph", str(model), "--cluster", "paper-4xk40", "--json", "--no-plot",
                 "--out", str(out), "--placers", "single,m_etf,heft,random_search", "--samples", "50"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["info"]["simulated"] is True and data["info"]["cluster"] == "paper-4xk40"
    assert data["notes"][0].startswith("simulated:")
    assert data["devices"] == ["cpu:0", "cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    rows = {r["name"]: r for r in data["rows"]}
    assert {"single:cuda:0", "single:cpu:0", "m_etf", "heft", "random_search"} <= set(rows)
    for row in rows.values():   # a simulated figure is exact: the step time is the prediction
        assert row["status"] == "ok" and row["step_time_s"] == row["predicted_step_time_s"] > 0
        assert row["ratio_to_lower_bound"] >= 1.0
    assert rows["single:cuda:0"]["step_time_s"] < rows["single:cpu:0"]["step_time_s"]
    assert data["lower_bound"]["value"] > 0 and (out / "compare.json").is_file()


def test_anything_real_on_hardware_this_machine_does_not_have_is_refused_in_one_line(tmp_path, capsys):
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    for argv in (["train", "--graph", str(model), "--cluster", "paper-2xk40", "--reward", "real",
                  "--run-dir", str(tmp_path / "run")],
                 ["train", "--graph", str(model), "--cluster", "paper-2xk40", "--reward", "simulated",
                  "--workers", "2", "--run-dir", str(tmp_path / "run2")],
                 ["measure", "--graph", str(model), "--cluster", "paper-4xk40"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "hardware this machine does not have" in err, err


def test_train_on_a_described_cluster_learns_in_the_simulator_and_its_closing_comparison_is_simulated(tmp_path,
                                                                                                     capsys):
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    run = tmp_path / "run"
    code = main(["train", "--graph", str(model), "--cluster", "paper-2xk40", "--reward", "simulated",
                 "--samples", "64", "--run-dir", str(run), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "simulated again side by side" in printed and "measured" not in printed.split("simulating every")[0][-200:]
    compared = json.loads((run / "compare" / "compare.json").read_text())
    assert compared["info"]["simulated"] is True and compared["info"]["cluster"] == "paper-2xk40"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["samples_by_reward"]["real"] == 0


def test_polishing_the_learned_placement_counts_in_the_samples_and_never_makes_it_slower(tmp_path, capsys):
    from placer.costmodel.roofline import RooflineCostModel
    from placer.costmodel.simulator import Simulator
    from placer.graph.load import load_graph
    from placer.hardware import load_cluster
    from placer.placement import Placement

    model = _tiny_model_file(tmp_path / "tiny.onnx")
    run = tmp_path / "run"
    assert main(["train", "--graph", str(model), "--cluster", "cpu-fast-slow-gpu", "--reward", "simulated",
                 "--samples", "128", "--polish", "0.5", "--run-dir", str(run), "--no-progress", "--no-compare"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    polish = summary["polish"]
    assert 0 < polish["samples"] <= 64 and polish["to_s"] <= polish["from_s"]
    assert summary["samples"] <= 128 + 16   # the learner's whole updates, then the polish: the budget holds
    graph, cluster = load_graph(model), load_cluster("cpu-fast-slow-gpu")
    sim = Simulator(graph, cluster.device_names, RooflineCostModel(cluster, graph))
    index = {d: i for i, d in enumerate(cluster.device_names)}
    placed = Placement.load(run / "placement.json")
    assert sim.simulate([index[placed.nodes[n]] for n in graph.nodes]).step_time == polish["to_s"]
    assert main(["train", "--graph", str(model), "--cluster", "cpu-fast-slow-gpu", "--reward", "simulated",
                 "--polish", "0.5", "--run-dir", str(tmp_path / "nosamples"), "--budget", "1s"]) == 2
    assert "--samples" in capsys.readouterr().err


def test_a_budget_without_a_sample_count_trains_on_a_cluster_without_polishing(tmp_path):
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    run = tmp_path / "run"
    assert main(["train", "--graph", str(model), "--cluster", "paper-2xk40", "--reward", "simulated",
                 "--budget", "2s", "--run-dir", str(run), "--no-progress", "--no-compare"]) == 0
    assert "polish" not in json.loads((run / "summary.json").read_text())
