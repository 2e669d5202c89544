"""`--micro-batches` and `--schedule` on `placer run` and `placer measure`: each micro-batch's
outputs, gradients summed over them, the throughput beside the step time, refusals in one line."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from placer.cli import main
from placer.graph.load import load_graph
from placer.placement import Placement
from testgraphs import branches


@pytest.fixture
def chain(tmp_path):
    """A 4-layer chain and a 2-stage placement of it."""
    path = tmp_path / "chain.onnx"
    onnx.save(branches(1, 4, width=16, batch=2), path)
    graph = load_graph(path)
    nodes = list(graph.nodes)
    Placement(["cpu:0", "cpu:1"], {n: f"cpu:{2 * i // len(nodes)}" for i, n in enumerate(nodes)},
              graph.sha256).save(tmp_path / "stages.json")
    return path, tmp_path / "stages.json"


def test_run_saves_each_micro_batchs_outputs_as_the_micro_batch_alone(chain, tmp_path):
    path, stages = chain
    x = np.random.default_rng(0).standard_normal((3, 2, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", **{f"x#{k}": x[k] for k in range(3)})
    assert main(["run", "--graph", str(path), "--placement", str(stages), "--micro-batches", "3",
                 "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "piped.npz")]) == 0
    piped = np.load(tmp_path / "piped.npz")
    assert sorted(piped.files) == ["y#0", "y#1", "y#2"]
    for k in range(3):
        np.savez(tmp_path / "one.npz", x=x[k])
        assert main(["run", "--graph", str(path), "--placement", str(stages), "--inputs", str(tmp_path / "one.npz"),
                     "--outputs", str(tmp_path / "alone.npz")]) == 0
        np.testing.assert_array_equal(piped[f"y#{k}"], np.load(tmp_path / "alone.npz")["y"])


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_run_of_a_pipelined_training_step_sums_the_micro_batches_gradients(chain, tmp_path, schedule):
    path, stages = chain
    x = np.random.default_rng(1).standard_normal((2, 2, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", **{f"x#{k}": x[k] for k in range(2)})
    assert main(["run", "--graph", str(path), "--placement", str(stages), "--objective", "training",
                 "--micro-batches", "2", "--schedule", schedule, "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(tmp_path / "piped.npz")]) == 0
    piped = np.load(tmp_path / "piped.npz")
    total = {}
    for k in range(2):
        np.savez(tmp_path / "one.npz", x=x[k])
        assert main(["run", "--graph", str(path), "--placement", str(stages), "--objective", "training",
                     "--inputs", str(tmp_path / "one.npz"), "--outputs", str(tmp_path / "alone.npz")]) == 0
        alone = np.load(tmp_path / "alone.npz")
        for g in (f for f in alone.files if f.startswith("grad:")):
            total[g] = alone[g] if g not in total else total[g] + alone[g]
    assert total and sorted(total) == sorted(f for f in piped.files if f.startswith("grad:"))
    for g, value in total.items():
        np.testing.assert_allclose(piped[g], value, rtol=1e-6, atol=1e-6)


def test_measure_reports_the_whole_step_and_the_throughput(chain, capsys):
    path, stages = chain
    assert main(["measure", "--graph", str(path), "--placement", str(stages), "--micro-batches", "4",
                 "--warmup", "0", "--repeats", "1", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["ok"] and m["micro_batches"] == 4 and m["protocol"]["micro_batches"] == 4
    assert m["throughput_per_s"] == pytest.approx(4 / m["step_time"])
    assert main(["measure", "--graph", str(path), "--placement", str(stages), "--micro-batches", "4",
                 "--objective", "training", "--warmup", "0", "--repeats", "1"]) == 0
    assert "micro-batches/s  (4 per step, 1f1b)" in capsys.readouterr().out


def test_onnxruntime_runs_and_measures_the_pipelined_step(chain, tmp_path, capsys):
    """--engine onnxruntime: each micro-batch's outputs as ORT on the whole model gives them, its
    inputs `name#k` or random from --seed + k; measure reports the whole step and the throughput."""
    import onnxruntime as ort

    from placer.graph.feeds import random_feeds

    path, stages = chain
    x = np.random.default_rng(2).standard_normal((2, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", **{"x#1": x})
    assert main(["run", "--graph", str(path), "--placement", str(stages), "--engine", "onnxruntime",
                 "--micro-batches", "3", "--seed", "5", "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(tmp_path / "out.npz")]) == 0
    out = np.load(tmp_path / "out.npz")
    assert sorted(out.files) == ["y#0", "y#1", "y#2"]
    whole = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for k, inputs in enumerate([random_feeds(load_graph(path), 5), {"x": x}, random_feeds(load_graph(path), 7)]):
        np.testing.assert_allclose(out[f"y#{k}"], whole.run(None, inputs)[0], rtol=1e-5, atol=1e-6)
    capsys.readouterr()
    assert main(["measure", "--graph", str(path), "--placement", str(stages), "--engine", "onnxruntime",
                 "--micro-batches", "4", "--warmup", "0", "--repeats", "1", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["ok"] and m["protocol"]["engine"] == "onnxruntime" and m["protocol"]["micro_batches"] == 4
    assert m["throughput_per_s"] == pytest.approx(4 / m["step_time"])
    assert main(["measure", "--graph", str(path), "--placement", str(stages), "--engine", "onnxruntime",
                 "--warmup", "0", "--repeats", "1", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert all(m["peak_memory"][d] > one["peak_memory"][d] for d in one["peak_memory"])   # 4 micro-batches' inputs


@pytest.mark.parametrize("args, message", [(["--micro-batches", "0"], "--micro-batches must be"),
                                           (["--micro-batches", "2", "--engine", "onnxruntime", "--objective", "training"],
                                            "the training objective runs on the torch engine")])
def test_a_bad_pipeline_is_one_line(chain, capsys, args, message):
    path, stages = chain
    assert main(["measure", "--graph", str(path), "--placement", str(stages), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
