"""`placer train --objective training`: every reward mode learns on training steps, the summary and
the closing comparison are of training steps, and a run resumes only on its own objective."""

import json

import pytest

from placer.cli import main

from .test_compare import _tiny_model_file

FAST = ["--hidden-size", "16", "--samples-per-update", "4", "--no-progress", "--devices", "cpu:0,cpu:1",
        "--warmup", "0", "--repeats", "1"]


@pytest.mark.parametrize("reward", ["real", "simulated", "hybrid"])
def test_every_reward_mode_learns_and_reports_training_steps(reward, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    run = tmp_path / "run"
    extra = ["--no-compare"] if reward != "hybrid" else []   # one mode runs the closing comparison
    assert main(["train", "--graph", str(model), "--reward", reward, "--samples", "8", "--run-dir", str(run),
                 "--objective", "training", "--optimizer", "adam", *FAST, *extra]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["measurer"]["protocol"]["objective"] == "training" and summary["best_step_time"] > 0
    assert summary["objective"] == {"objective": "training", "loss": "mse", "optimizer": "adam", "lr": 0.001}
    for written in ("placement.json", "greedy_placement.json"):   # the placements say what they were trained for
        assert json.loads((run / written).read_text())["objective"] == summary["objective"]
    if reward != "real":
        simulator = summary["simulator"]["protocol"]
        assert simulator["objective"] == "training" and simulator["optimizer"] == "adam"
        assert simulator["cost_model"] == "ProfiledCostModel"
        profile = json.loads(next((tmp_path / "cache" / "profiles").glob("*.json")).read_text())
        assert profile["protocol"]["objective"] == "training" and "update:w1" in profile["op_times"]
    if reward == "hybrid":
        compared = json.loads((run / "compare" / "compare.json").read_text())
        assert compared["info"]["protocol"]["objective"] == "training"
        assert all(r["measurement"]["protocol"]["objective"] == "training" for r in compared["rows"]
                   if r["measurement"] is not None)


def test_a_run_resumes_only_on_its_own_objective(tmp_path, capsys):
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    run = tmp_path / "run"

    def train(objective: str, *extra: str) -> int:
        return main(["train", "--graph", str(model), "--reward", "simulated", "--cost-model", "analytic",
                     "--run-dir", str(run), *FAST, "--objective", objective, "--no-compare", *extra])

    assert train("training", "--samples", "4") == 0
    assert train("inference", "--samples", "8", "--resume") == 2
    assert "different objective" in capsys.readouterr().err
    assert train("training", "--samples", "8", "--resume") == 0
