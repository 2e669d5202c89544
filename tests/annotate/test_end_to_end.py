"""A zoo model (torch export, small options) through the whole chain: a placement file is applied,
read back, run by the placed executor, measured, split and chained in onnxruntime, and drawn."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch

import graphs
from placer.annotate.chain import run_split
from placer.annotate.read import read_placement
from placer.cli import main
from placer.graph.load import load_graph
from placer.engines.torch.executor import PlacedExecutor
from placer.graph.feeds import random_feeds
from placer.measure.measurer import MeasureProtocol, RealMeasurer
from placer.placement import FORMAT

ort = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def rnnlm(tmp_path_factory):
    return graphs.export("rnnlm", tmp_path_factory.mktemp("zoo") / "rnnlm.onnx", batch=2, seq_len=3, vocab=50)


def _ort(path, feeds):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def test_zoo_model_placement_applies_reads_back_runs_measures_splits_and_draws(tmp_path, rnnlm, capsys):
    graph = load_graph(rnnlm)
    order = list(graph.nodes)
    # by hand, in the file format: the first half of the ops on cpu:0, the rest on cpu:1
    nodes = {name: "cpu:0" if i < len(order) // 2 else "cpu:1" for i, name in enumerate(order)}
    placement_path = tmp_path / "placement.json"
    placement_path.write_text(json.dumps({"format": FORMAT, "graph": {"sha256": graph.sha256},
                                          "devices": ["cpu:0", "cpu:1"], "nodes": nodes}))
    placed_path, parts = tmp_path / "placed.onnx", tmp_path / "parts"
    assert main(["apply", "--graph", str(rnnlm), "--placement", str(placement_path),
                 "-o", str(placed_path), "--split", str(parts)]) == 0

    placed_graph = load_graph(placed_path)
    assert placed_graph.sha256 == graph.sha256
    stored = read_placement(placed_graph.model)
    assert stored.nodes == nodes and stored.graph_sha256 == graph.sha256

    feeds = random_feeds(graph, seed=0)
    expected = _ort(rnnlm, feeds)
    assert _ort(placed_path, feeds).keys() == expected.keys()
    for name, value in _ort(placed_path, feeds).items():
        np.testing.assert_array_equal(value, expected[name])

    with PlacedExecutor(placed_graph, stored, ["cpu:0", "cpu:1"]) as executor:
        ran = executor.run(feeds)
    for name, value in expected.items():
        np.testing.assert_allclose(ran[name].cpu().numpy(), value, rtol=1e-4, atol=1e-5)

    measured = RealMeasurer(placed_graph, ["cpu:0", "cpu:1"], MeasureProtocol(warmup=0, repeats=1)).measure(stored)
    assert measured.ok and measured.step_time > 0

    index = json.loads((parts / "split.json").read_text())
    assert {s["device"] for s in index["stages"]} == {"cpu:0", "cpu:1"}
    for entry in index["stages"]:
        onnx.checker.check_model(onnx.load(parts / entry["file"]), full_check=True)
    chained = run_split(parts, feeds)
    for name, value in expected.items():
        np.testing.assert_allclose(chained[name], value, rtol=1e-5, atol=1e-6)

    picture = tmp_path / "placement.png"
    assert main(["show", "--graph", str(placed_path), "-o", str(picture)]) == 0
    assert f"{len(order)} nodes on 2 devices" in capsys.readouterr().out and picture.stat().st_size > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_stored_gpu_placement_resolves_and_runs_on_this_gpu(tmp_path):
    from placer.annotate.write import apply_placement, save_model
    from placer.jobs.settings import PlacementSettings
    from placer.placement import Placement

    from .conftest import diamond_model, feeds_for, ort_run, placement_json

    graph = load_graph(diamond_model())
    gpu = Placement.from_dict(placement_json(graph, {"conv_a": "cuda:0", "mul": "cuda:0"}, "cpu", ["cpu", "cuda:0"]))
    path = save_model(apply_placement(diamond_model(), gpu, graph), tmp_path / "placed.onnx")
    placed_graph = load_graph(path)
    resolved = PlacementSettings().to_run(placed_graph)
    assert resolved.nodes == gpu.nodes
    feeds = feeds_for(graph)
    with PlacedExecutor(placed_graph, resolved, resolved.devices) as executor:
        ran = executor.run(feeds)
    np.testing.assert_allclose(ran["y"].cpu().numpy(), ort_run(diamond_model(), feeds)["y"], rtol=1e-4, atol=1e-5)


def test_a_placement_learned_by_the_trainer_applies_and_reads_back(tmp_path, rnnlm):
    from placer.graph.grouping import group_graph
    from placer.costmodel.simulator import SimulatedMeasurer
    from placer.policy.hparams import Hyperparameters
    from placer.policy.trainer import train

    graph = load_graph(rnnlm)
    devices = ["cpu:0", "cpu:1"]
    run_dir = tmp_path / "run"
    train(graph, SimulatedMeasurer(graph, devices), group_graph(graph, 8, 2), run_dir,
          Hyperparameters(hidden_size=16, samples_per_update=2), samples=4, seed=0)
    placed = tmp_path / "placed.onnx"
    assert main(["apply", "--graph", str(rnnlm), "--placement", str(run_dir / "placement.json"),
                 "-o", str(placed)]) == 0
    learned = json.loads((run_dir / "placement.json").read_text())
    stored = read_placement(onnx.load(placed))
    assert stored.nodes == learned["nodes"] and stored.graph_sha256 == graph.sha256
    assert stored.measurement == learned.get("measurement")
