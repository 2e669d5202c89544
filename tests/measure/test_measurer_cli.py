"""`placer measure`: step time, spread and peak memory of a placement, as text or JSON."""

from __future__ import annotations

import json

import onnx
import pytest

from placer.cli import main
from placer.graph.load import load_graph
from placer.placement import Placement

from .conftest import branchy_model


@pytest.fixture()
def model_path(tmp_path):
    path = tmp_path / "branchy.onnx"
    onnx.save(branchy_model(), path)
    return path


def test_measure_prints_step_time_and_memory(model_path, capsys):
    assert main(["measure", "--graph", str(model_path), "--device", "cpu", "--warmup", "0", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    assert "step time" in out and "ms" in out and "peak memory  cpu" in out


def test_measure_json_for_a_placement_file_over_two_devices(model_path, tmp_path, capsys):
    graph = load_graph(model_path)
    placement = Placement(["cpu:0", "cpu:1"], {n: f"cpu:{i % 2}" for i, n in enumerate(graph.nodes)},
                          graph_sha256=graph.sha256)
    placement.save(tmp_path / "p.json")
    code = main(["measure", "--graph", str(model_path), "--placement", str(tmp_path / "p.json"),
                 "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--repeats", "2", "--warmup", "1", "--json",
                 "--profile", str(tmp_path / "profile.json")])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and data["step_time"] > 0 and len(data["times"]) == 2
    assert set(data["peak_memory"]) == {"cpu:0", "cpu:1"}
    assert data["protocol"]["devices"] == ["cpu:0[threads=1]", "cpu:1[threads=1]"]
    assert data["graph"]["sha256"] == graph.sha256
    profile = json.loads((tmp_path / "profile.json").read_text())
    assert set(profile["op_times"]) == set(graph.nodes)


def test_measure_failure_exits_1_with_the_reason(model_path, capsys):
    code = main(["measure", "--graph", str(model_path), "--device", "cpu:0", "--devices", "cpu:0[mem=1KiB]"])
    assert code == 1
    assert "failed       oom" in capsys.readouterr().out


def _inference_and_training(model_path, capsys) -> tuple[dict, dict]:
    """`placer measure --json` of the inference step, then of the training step with Adam."""
    args = ["measure", "--graph", str(model_path), "--device", "cpu", "--warmup", "1", "--repeats", "3", "--json"]
    assert main(args) == 0
    inference = json.loads(capsys.readouterr().out)
    assert main([*args, "--objective", "training", "--optimizer", "adam"]) == 0
    return inference, json.loads(capsys.readouterr().out)


def test_measure_training_step_records_its_objective_and_holds_more_memory(model_path, capsys):
    inference, training = _inference_and_training(model_path, capsys)
    assert inference["protocol"]["objective"] == "inference"
    assert {k: training["protocol"][k] for k in ("objective", "loss", "optimizer", "lr")} == \
        {"objective": "training", "loss": "mse", "optimizer": "adam", "lr": 0.001}
    # saved activations, gradients and Adam's two moments of every parameter
    assert training["peak_memory"]["cpu"] > inference["peak_memory"]["cpu"]


@pytest.mark.timing
def test_measure_training_step_takes_longer(model_path, capsys):
    """Two real step times against each other (a sub-millisecond graph): a busy machine can turn
    them round, so it is under the marker timing (docs/testing.md)."""
    inference, training = _inference_and_training(model_path, capsys)
    assert training["step_time"] > inference["step_time"]


def test_measure_writes_a_training_profile_with_backward_and_update_times(model_path, tmp_path, capsys):
    assert main(["measure", "--graph", str(model_path), "--device", "cpu", "--objective", "training",
                 "--optimizer", "adam", "--warmup", "0", "--repeats", "1",
                 "--profile", str(tmp_path / "p.json")]) == 0
    profile = json.loads((tmp_path / "p.json").read_text())
    assert profile["protocol"]["objective"] == "training" and profile["protocol"]["optimizer"] == "adam"
    assert "backward:conv_a" in profile["op_times"] and "update:w1" in profile["op_times"]
