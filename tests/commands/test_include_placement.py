"""`placer compare --include-placement FILE` (repeatable): a user's placement files beside the
baselines, simulated or measured like them; a file for another graph, other devices or another
cluster refused in one line."""

from __future__ import annotations

import json

import pytest

from placer.cli import main
from placer.graph.load import load_graph
from placer.placement import Placement

from .test_compare import _tiny_model_file


@pytest.fixture
def model(tmp_path):
    return _tiny_model_file(tmp_path / "tiny.onnx")


def _save(path, graph, devices, pick, **extra):
    nodes = {n: pick(i) for i, n in enumerate(graph.nodes)}
    Placement(devices, nodes, graph.sha256, extra={"placer": extra} if extra else {}).save(path)
    return str(path)


def test_included_files_are_rows_simulated_like_the_baselines(tmp_path, model, capsys):
    graph = load_graph(model)
    devices = ["cpu:0", "cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    alone = _save(tmp_path / "alone.onnx.json", graph, devices, lambda i: "cuda:1")
    split = _save(tmp_path / "split.json", graph, devices, lambda i: devices[1 + i % 2], cluster="paper-4xk40",
                  seconds_to_place=0.25)
    code = main(["compare", "--graph", str(model), "--cluster", "paper-4xk40", "--json", "--no-plot",
                 "--out", str(tmp_path / "out"), "--placers", "single,heft", "--include-placement", alone,
                 "--include-placement", split])
    assert code == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert {"file:alone.onnx", "file:split", "single:cuda:1", "heft"} <= set(rows)
    for name in ("file:alone.onnx", "file:split"):
        assert rows[name]["placer"] == "included" and rows[name]["status"] == "ok"
        assert rows[name]["step_time_s"] == rows[name]["predicted_step_time_s"] > 0
    # the file that puts everything on cuda:1 is the single-device baseline's placement, priced alike
    assert rows["file:alone.onnx"]["step_time_s"] == rows["single:cuda:1"]["step_time_s"]
    assert rows["file:split"]["step_time_s"] != rows["file:alone.onnx"]["step_time_s"]
    assert rows["file:split"]["find_time_s"] == 0.25


def test_a_file_of_one_name_twice_gives_two_rows(tmp_path, model, capsys):
    graph = load_graph(model)
    path = _save(tmp_path / "p.json", graph, ["cpu:0", "cuda:0"], lambda i: "cuda:0")
    assert main(["compare", "--graph", str(model), "--cluster", "paper-2xk40", "--json", "--no-plot", "--out",
                 str(tmp_path / "out"), "--placers", "single", "--include-placement", path,
                 "--include-placement", path]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)["rows"]]
    assert "file:p" in names and "file:p#2" in names


def test_an_included_file_is_measured_for_real_on_this_machines_devices(tmp_path, model, capsys, monkeypatch):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    graph = load_graph(model)
    path = _save(tmp_path / "mine.json", graph, ["cpu:0", "cpu:1"], lambda i: ["cpu:0", "cpu:1"][i % 2])
    code = main(["compare", "--graph", str(model), "--devices", "cpu:0,cpu:1", "--json", "--no-plot", "--no-history",
                 "--out", str(tmp_path / "out"), "--placers", "single", "--warmup", "0", "--min-rounds", "6",
                 "--max-rounds", "6", "--blocks", "1", "--include-placement", path])
    assert code == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["file:mine"]["placer"] == "included" and rows["file:mine"]["status"] == "ok"
    # measured in the rounds, as every row: its own interval and one paired with the best single device
    measured = rows["file:mine"]["measurement"]
    assert measured["interval"] is not None and len(measured["times"]) == 6
    assert rows["file:mine"]["speedup_vs_best_single_interval"] is not None


@pytest.mark.parametrize("case", ["other graph", "device it lacks", "other cluster", "cluster file on this machine"])
def test_a_file_for_another_graph_devices_or_cluster_is_one_line_and_exit_2(tmp_path, model, capsys, case):
    graph = load_graph(model)
    argv = ["compare", "--graph", str(model), "--no-plot", "--out", str(tmp_path / "out"), "--placers", "single"]
    if case == "other graph":
        bad = Placement(["cuda:0"], {n: "cuda:0" for n in graph.nodes}, "0" * 64)
        bad.save(tmp_path / "bad.json")
        argv += ["--cluster", "paper-2xk40"]
        expected = "made for another graph"
    elif case == "device it lacks":
        _save(tmp_path / "bad.json", graph, ["cuda:0", "cuda:3"], lambda i: ["cuda:0", "cuda:3"][i % 2])
        argv += ["--cluster", "paper-2xk40"]
        expected = "the comparison has no cuda:3"
    elif case == "other cluster":
        _save(tmp_path / "bad.json", graph, ["cuda:0"], lambda i: "cuda:0", cluster="4xa100-nvlink")
        argv += ["--cluster", "paper-2xk40"]
        expected = "made for cluster '4xa100-nvlink', not cluster 'paper-2xk40'; compare it with --cluster 4xa100-nvlink"
    else:
        _save(tmp_path / "bad.json", graph, ["cpu:0"], lambda i: "cpu:0", cluster="paper-2xk40")
        argv += ["--devices", "cpu:0,cpu:1"]
        expected = "made for cluster 'paper-2xk40', not this machine's devices"
    capsys.readouterr()
    assert main(argv + ["--include-placement", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--include-placement {tmp_path / 'bad.json'}" in err and expected in err, err
    assert not (tmp_path / "out" / "compare.json").exists()


def test_what_placer_place_writes_is_compared_on_its_cluster_and_refused_on_another(tmp_path, model, capsys):
    from placer.policy.gnn.checkpoint import save_policy
    from placer.policy.gnn.model import GraphPlacementPolicy, PolicyConfig

    policy = save_policy(GraphPlacementPolicy(PolicyConfig()), tmp_path / "policy.pt")   # untrained: any placement
    placed = tmp_path / "placed.json"
    assert main(["place", "--graph", str(model), "--cluster", "paper-2xk40", "--policy", str(policy),
                 "--out", str(placed)]) == 0
    argv = ["compare", "--graph", str(model), "--no-plot", "--out", str(tmp_path / "out"), "--placers", "single",
            "--include-placement", str(placed)]
    capsys.readouterr()
    assert main(argv + ["--cluster", "paper-2xk40", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["file:placed"]["status"] == "ok" and rows["file:placed"]["find_time_s"] > 0
    assert main(argv + ["--cluster", "2xt4-pcie"]) == 2
    assert "made for cluster 'paper-2xk40', not cluster '2xt4-pcie'" in capsys.readouterr().err
