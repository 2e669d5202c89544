"""Control flow (If, Loop, Scan) as single ops: each node runs its subgraphs on its device with the
values it reads from the enclosing graph handed over like any input, under any placement; the
outputs equal onnxruntime's, the split runs in onnxruntime, and the training step's gradients
equal torch autograd on the scripted module that was exported."""

from __future__ import annotations

import random

import numpy as np
import onnx
import pytest
import torch

import controlflow
from placer.annotate.chain import run_split
from placer.annotate.split import write_split
from placer.cli import main
from placer.graph.summary import format_summary, summarize
from placer.engines.torch.executor import PlacedExecutor
from placer.kernels.loading import load_graph
from placer.measure.measurer import MeasureProtocol
from placer.kernels.prepare import prepare
from placer.costmodel.profile import Profile
from placer.costmodel.profiler import profile_graph
from placer.placement import Placement

from .test_training_exports import _placer_run

ort = pytest.importorskip("onnxruntime")
DEVICES = ["cpu:0", "cpu:1"]


@pytest.fixture(scope="module", params=["gate", "decode", "bounded", "scan"])
def case(request, tmp_path_factory):
    """(name, path, model, graph, module or None)."""
    path = tmp_path_factory.mktemp("cf") / f"{request.param}.onnx"
    if request.param == "scan":
        module, model = None, controlflow.scan_model()
        onnx.save(model, str(path))
    else:
        module, model = controlflow.export_scripted(request.param, path)
    return request.param, path, model, load_graph(path), module


def _random_placements(graph, count: int, seed: int):
    rng = random.Random(seed)
    for _ in range(count):
        yield Placement(DEVICES, {n: rng.choice(DEVICES) for n in graph.nodes}, graph.sha256)


def test_control_flow_nodes_are_single_ops_reading_outer_values_as_inputs(case):
    name, _, _, graph, _ = case
    node = next(n for n in graph.nodes.values() if n.op_type in ("If", "Loop", "Scan"))
    assert node.implicit_inputs and node.inputs[-len(node.implicit_inputs):] == node.implicit_inputs
    assert all(graph.producer.get(t) is None or graph.dag.has_edge(graph.producer[t], node.name)
               for t in node.implicit_inputs)
    assert node.flops > 0     # its subgraphs' work, not 0


def test_random_two_device_placements_compute_what_onnxruntime_computes(case):
    name, _, model, graph, _ = case
    session = ort.InferenceSession(model.SerializeToString())
    prepared = prepare(graph)
    taken = set()
    for seed, placement in enumerate(_random_placements(graph, 4, 0)):
        x = controlflow.feeds(model, seed, scale=[0.2, 3.0][seed % 2])   # both branches, short and long loops
        expected = session.run(None, x)
        with PlacedExecutor(graph, placement, DEVICES, prepared=prepared) as executor:
            ours = executor.run(x)
        for out, value in zip(session.get_outputs(), expected):
            np.testing.assert_allclose(ours[out.name].numpy(), value, rtol=1e-5, atol=1e-6)
        taken.add(float(np.abs(expected[-1]).sum()))
    assert len(taken) == 4


def test_the_split_runs_in_onnxruntime_with_the_same_outputs(case, tmp_path):
    name, _, model, graph, _ = case
    session = ort.InferenceSession(model.SerializeToString())
    x = controlflow.feeds(model, 1)
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, x)))
    for k, placement in enumerate(_random_placements(graph, 2, 1)):
        split = write_split(model, placement, graph, tmp_path / f"parts{k}")
        ours = run_split(split, x)
        for out, value in expected.items():
            np.testing.assert_allclose(ours[out], value, rtol=1e-5, atol=1e-6)


def _torch_gradients(module, x) -> tuple[float, dict[str, torch.Tensor]]:
    """torch autograd on the module (loss mean(y^2)/2); a parameter of the branch not taken gets 0."""
    params = dict(module.named_parameters())
    loss = torch.mean(module(x) ** 2) / 2
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True, materialize_grads=True)
    return float(loss.detach()), dict(zip(params, grads))


@pytest.mark.parametrize("name", ["gate", "decode", "bounded"])
def test_training_gradients_through_control_flow_equal_torch_autograd(name, tmp_path):
    path = tmp_path / f"{name}.onnx"
    module, _ = controlflow.export_scripted(name, path)
    graph = load_graph(path)
    for scale in (0.2, 3.0):   # each branch; loops stopped early after 1 step and later (bounded: its trip count)
        torch.manual_seed(1)
        x = torch.randn(controlflow.MODULES[name][1]) * scale
        loss, expected = _torch_gradients(module, x)
        assert set(expected) <= set(graph.initializers)
        for placement in (None, *_random_placements(graph, 1, 2)):
            ours = _placer_run(tmp_path, path, graph, x, placement)
            assert float(ours["loss"]) == pytest.approx(loss, rel=1e-5)
            for param, grad in expected.items():
                np.testing.assert_allclose(ours[f"grad:{param}"], grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=param)


def test_an_op_without_a_backward_inside_a_subgraph_is_refused_naming_the_node(tmp_path, capsys):
    model = controlflow.scan_model()
    body = model.graph.node[1].attribute[0].g
    body.node[0].op_type = "RandomNormalLike"   # the body's MatMul becomes a draw on the gradient path
    del body.node[0].input[1:]
    onnx.save(model, str(tmp_path / "noisy.onnx"))
    np.savez(tmp_path / "in.npz", **controlflow.feeds(model, 0))
    assert main(["run", "--graph", str(tmp_path / "noisy.onnx"), "--device", "cpu", "--inputs",
                 str(tmp_path / "in.npz"), "--objective", "training"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "RandomNormalLike (scan)" in err


def test_control_flow_that_draws_at_random_is_not_folded_though_its_inputs_are_constants():
    x = {"x": np.zeros((3, 2, 3), np.float32)}
    for draw in (False, True):
        graph = load_graph(controlflow.constant_loop(draw))
        prepared = prepare(graph)
        assert ("loop" in prepared.folded_nodes) is not draw   # a deterministic body folds once
        with PlacedExecutor(graph, Placement.single_device(list(graph.nodes), "cpu", graph.sha256), ["cpu"],
                            prepared=prepared) as executor:
            first, second = (executor.run(x)["y"].numpy() for _ in range(2))
        assert (first == second).all() is not draw   # each step draws anew
        assert draw or (first == 1).all()


def test_inspect_says_which_costs_depend_on_the_data(case):
    name, _, _, graph, _ = case
    text = format_summary(summarize(graph))
    reasons = summarize(graph).data_dependent
    if name == "scan":
        assert not reasons   # a Scan's length is its input's: static (its nested If is inside it)
    else:
        # torch writes no count for decode (its condition ends it); bounded has a count and a condition
        assert list(reasons.values()) == [{"gate": "the branch taken", "decode": "its trip count",
                                           "bounded": "a condition that may end it early"}[name]]
        assert "a profile times what the profiling inputs did" in text
        assert "the data (1 node):" in text


@pytest.mark.parametrize("name, small, large", [("gate", "else branch", "then branch"),
                                                ("bounded", "1 iteration", "2 iterations")])
def test_a_profile_records_what_its_inputs_made_control_flow_do(name, small, large, tmp_path, capsys):
    path = tmp_path / f"{name}.onnx"
    _, model = controlflow.export_scripted(name, path)
    graph = load_graph(path)
    node = next(n for n, op in graph.nodes.items() if op.data_dependence)
    prepared = prepare(graph)   # one kernel for both profiles: each records its own runs only
    for scale, did in ((0.2, small), (3.0, large)):
        profile = profile_graph(graph, ["cpu:0"], MeasureProtocol(warmup=1, repeats=2), settle=None, prepared=prepared,
                                feeds=controlflow.feeds(model, 0, scale), transfer_sizes=())
        # the warm-up's run timed per node and its whole-graph run, then each of the two rounds' likewise
        assert profile.control_flow == {node: {did: 6}}
    profile.save(tmp_path / "profile.json")
    assert Profile.load(tmp_path / "profile.json").control_flow == profile.control_flow
    assert main(["inspect", "--graph", str(path), "--profile", str(tmp_path / "profile.json")]) == 0
    assert f"  {node}: {large} (6 runs)" in capsys.readouterr().out
    Profile(["cpu:0"], {}, graph_sha256="0" * 64).save(tmp_path / "other.json")
    assert main(["inspect", "--graph", str(path), "--profile", str(tmp_path / "other.json")]) == 2
    assert "is of another graph" in capsys.readouterr().err.strip().splitlines()[-1]


def test_a_static_trip_count_multiplies_the_body_flops(tmp_path):
    model = controlflow.bounded_decode(controlflow.MODULES["bounded"][0]())
    flops = []
    for trips in (1, 2, 5):
        steps = next(t for t in model.graph.initializer if t.name == "steps")
        steps.CopyFrom(onnx.numpy_helper.from_array(np.array(trips, np.int64), "steps"))
        flops.append(load_graph(model).nodes["decode"].flops)
    assert flops[0] > 0 and flops[1:] == [2 * flops[0], 5 * flops[0]]


def test_train_and_apply_a_control_flow_model(case, tmp_path):
    name, path, _, graph, _ = case
    run = tmp_path / "run"
    assert main(["train", "--graph", str(path), "--reward", "simulated", "--cost-model", "analytic", "--samples", "8",
                 "--run-dir", str(run), "--hidden-size", "16", "--samples-per-update", "4", "--no-progress",
                 "--devices", "cpu:0,cpu:1", "--no-compare", "--warmup", "0", "--repeats", "1"]) == 0
    assert main(["apply", "--graph", str(path), "--placement", str(run / "placement.json"),
                 "-o", str(tmp_path / "placed.onnx"), "--split", str(tmp_path / "parts")]) == 0
    placed = onnx.load(str(tmp_path / "placed.onnx"))
    assert all(any(e.key == "placer.device" for e in n.metadata_props) for n in placed.graph.node)
