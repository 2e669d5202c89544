"""--engine onnxruntime on placer run and placer measure."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from placer.cli import main
from placer.kernels.loading import load_graph
from testgraphs import branches

from .conftest import random_placement, whole_model_outputs


@pytest.fixture()
def files(tmp_path):
    model = branches(2, depth=2)
    onnx.save(model, tmp_path / "m.onnx")
    graph = load_graph(model)
    random_placement(graph, 2, 3).save(tmp_path / "p.json")
    return tmp_path, model


def test_run_in_onnxruntime_gives_the_whole_models_outputs(files, capsys):
    folder, model = files
    x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    np.savez(folder / "in.npz", x=x)
    assert main(["run", "--graph", str(folder / "m.onnx"), "--placement", str(folder / "p.json"),
                 "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--engine", "onnxruntime",
                 "--inputs", str(folder / "in.npz"), "--timeout", "10", "--outputs", str(folder / "out.npz")]) == 0
    with np.load(folder / "out.npz") as out:
        np.testing.assert_allclose(out["y"], whole_model_outputs(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)


def test_measure_in_onnxruntime_records_the_engine(files, capsys):
    folder, _ = files
    assert main(["measure", "--graph", str(folder / "m.onnx"), "--placement", str(folder / "p.json"),
                 "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--engine", "onnxruntime",
                 "--warmup", "0", "--repeats", "2", "--json", "--profile", str(folder / "prof.json")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and data["protocol"]["engine"] == "onnxruntime"
    profile = json.loads((folder / "prof.json").read_text())
    assert profile["protocol"]["engine"] == "onnxruntime" and profile["op_times"]["mm0_0"]["cpu:1"] > 0


@pytest.mark.parametrize("command", ["run", "measure"])
def test_the_training_objective_under_onnxruntime_is_a_one_line_error(files, capsys, command):
    folder, _ = files
    assert main([command, "--graph", str(folder / "m.onnx"), "--engine", "onnxruntime",
                 "--objective", "training"]) == 2
    assert capsys.readouterr().err.strip() == ("error: the training objective runs on the torch engine; "
                                               "drop --engine onnxruntime")
