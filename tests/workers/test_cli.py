"""`placer train --workers N [--ray-address ...]`: a real run on workers, and one-line errors."""

from __future__ import annotations

import json
import sys
import time

import onnx
import pytest
import torch

from placer.cli import main
from placer.policy.checkpoint import FILENAME
from testgraphs import branches

# One 1-thread device per worker: two workers fit the 2 cores of the test runtime.
FAST = ["--devices", "cpu:0[threads=1]", "--reward", "real", "--hidden-size", "16", "--samples-per-update", "2",
        "--warmup", "0", "--repeats", "1", "--cost-model", "analytic", "--warm-start", "none", "--no-progress",
        "--no-compare"]


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "branches.onnx"
    onnx.save(branches(2, 1), path)
    return path


def test_train_measures_on_workers_and_prints_their_single_device_figures(model_file, tmp_path, capsys):
    code = main(["train", "--graph", str(model_file), "--samples", "4", "--run-dir", str(tmp_path / "run"),
                 "--workers", "2", *FAST])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "2 workers measured the single devices:" in out and "worker-1: cpu:0 " in out
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["samples"] >= 2


def test_train_measures_training_steps_on_workers(model_file, tmp_path, capsys):
    code = main(["train", "--graph", str(model_file), "--samples", "4", "--run-dir", str(tmp_path / "run"),
                 "--workers", "2", "--objective", "training", "--optimizer", "adam", *FAST])
    out = capsys.readouterr().out
    assert code == 0, out
    measured = torch.load(tmp_path / "run" / FILENAME, weights_only=False)["cache"]["entries"]
    assert measured and all(m["protocol"]["objective"] == "training" and m["protocol"]["optimizer"] == "adam"
                            for _, m in measured)


def test_train_measures_in_onnxruntime_on_workers(model_file, tmp_path, capsys):
    code = main(["train", "--graph", str(model_file), "--samples", "4", "--run-dir", str(tmp_path / "run"),
                 "--workers", "2", "--engine", "onnxruntime", *FAST])
    out = capsys.readouterr().out
    assert code == 0, out
    measured = torch.load(tmp_path / "run" / FILENAME, weights_only=False)["cache"]["entries"]
    assert measured and all(m["protocol"]["engine"] == "onnxruntime" for _, m in measured)


@pytest.mark.parametrize("extra, message", [
    (["--workers", "1", "--ray-address", "127.0.0.1:1"], "no Ray cluster answers at 127.0.0.1:1"),
    (["--workers", "1", "--ray-address", "ray://head"], "--ray-address takes HOST:PORT"),
    (["--ray-address", "auto"], "--ray-address needs --workers N"),
    (["--workers", "2", "--reward", "simulated"], "--reward simulated has none"),
    (["--workers", "3"], "3 workers of 1 cores and 0 GPUs each do not fit: the cluster holds 2"),
])
def test_worker_mistakes_are_one_line_errors_said_quickly(model_file, tmp_path, capsys, extra, message):
    started = time.monotonic()
    code = main(["train", "--graph", str(model_file), "--samples", "2", "--run-dir", str(tmp_path / "run"),
                 *FAST, *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
    assert time.monotonic() - started < 10


def test_without_ray_workers_say_how_to_install_it(model_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)     # import ray now fails, as when not installed
    code = main(["train", "--graph", str(model_file), "--samples", "2", "--run-dir", str(tmp_path / "run"),
                 "--workers", "2", *FAST])
    assert code == 2 and "pip install -e '.[ray]'" in capsys.readouterr().err
