"""PlacedExecutor: any placement computes what the single-device run and onnxruntime compute."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from placer.devices import parse_device
from placer.errors import PlacerError
from placer.engines.failures import KernelError, OutOfMemory, StepTimeout
from placer.engines.affinity import cpu_threads
from placer.engines.torch.executor import PlacedExecutor
from placer.kernels.prepare import prepare
from placer.placement import Placement

from .conftest import onnxruntime_outputs


def _x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 3, 8, 8)).astype(np.float32)


def _run(graph, nodes: dict[str, str], devices: list[str], feeds) -> dict[str, np.ndarray]:
    placement = Placement(devices=devices, nodes=nodes)
    with PlacedExecutor(graph, placement, devices) as executor:
        return {k: v.cpu().numpy() for k, v in executor.run(feeds).items()}


def test_single_device_matches_onnxruntime(branchy):
    model, graph = branchy
    x = _x()
    ours = _run(graph, {n: "cpu" for n in graph.nodes}, ["cpu"], {"x": x})
    ref = onnxruntime_outputs(model, {"x": x})
    assert set(ours) == {"probs", "a_relu"}
    for name in ref:
        np.testing.assert_allclose(ours[name], ref[name], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n_devices", [2, 3])
def test_random_placements_match_single_device(branchy, n_devices):
    model, graph = branchy
    x = _x(1)
    devices = [f"cpu:{i}" for i in range(n_devices)]
    single = _run(graph, {n: "cpu:0" for n in graph.nodes}, devices, {"x": x})
    rng = random.Random(n_devices)
    prepared = prepare(graph)
    for _ in range(6):
        nodes = {n: rng.choice(devices) for n in graph.nodes}
        with PlacedExecutor(graph, Placement(devices, nodes), devices, prepared=prepared) as executor:
            out = executor.run({"x": x})
            assert executor.schedule.crossings or len(set(nodes.values())) == 1
        for name, value in single.items():
            np.testing.assert_allclose(out[name].numpy(), value, rtol=1e-5, atol=1e-6)


def test_each_crossing_tensor_moves_once_per_destination(branchy):
    _, graph = branchy
    # 'a_relu' and 'x' are read by nodes on two other devices; 'a_relu' by two nodes of cpu:1
    nodes = {n: "cpu:0" for n in graph.nodes}
    nodes.update(conv_a2="cpu:1", conv_b="cpu:1", sig_b="cpu:2", add="cpu:1")
    placement = Placement(["cpu:0", "cpu:1", "cpu:2"], nodes)
    with PlacedExecutor(graph, placement) as executor:
        crossings = executor.schedule.crossings
        assert len(crossings) == len(set(crossings))
        assert ("a_relu", "cpu:0", "cpu:1") in crossings
        assert ("b", "cpu:1", "cpu:2") in crossings and ("b_sig", "cpu:2", "cpu:1") in crossings
        assert ("s", "cpu:1", "cpu:0") in crossings
        out = executor.run({"x": _x()})
        assert out["probs"].shape == (2, 10)


def test_shape_subgraph_is_folded_and_never_runs(branchy):
    _, graph = branchy
    prepared = prepare(graph)
    assert {"shape", "gather_batch", "unsqueeze", "concat"} <= set(prepared.folded_nodes)
    assert prepared.folded["flat_shape"].tolist() == [2, -1]
    placement = Placement.single_device(list(graph.nodes), "cpu")
    with PlacedExecutor(graph, placement, prepared=prepared) as executor:
        steps = [s.name for s in executor.schedule.per_device["cpu"].steps]
    assert "shape" not in steps and "reshape" in steps


def test_parameters_are_resident_only_where_their_nodes_run(branchy):
    _, graph = branchy
    nodes = {n: "cpu:0" for n in graph.nodes}
    nodes["head"] = "cpu:1"
    with PlacedExecutor(graph, Placement(["cpu:0", "cpu:1"], nodes)) as executor:
        assert executor.schedule.per_device["cpu:1"].consts == ["fc"]
        assert "fc" not in executor.schedule.per_device["cpu:0"].consts
        assert executor.peak_memory["cpu:1"] >= 512 * 10 * 4


def test_virtual_cpu_devices_run_with_their_own_thread_counts(branchy):
    _, graph = branchy
    devices = [parse_device("cpu:0[threads=1]"), parse_device("cpu:1[threads=2]")]
    nodes = {n: ("cpu:1" if n.startswith("conv_b") else "cpu:0") for n in graph.nodes}
    before = torch.get_num_threads()
    with PlacedExecutor(graph, Placement(["cpu:0", "cpu:1"], nodes), devices) as executor:
        assert executor.worker_threads() == {"cpu:0": 1, "cpu:1": 2}
    assert torch.get_num_threads() == before


def test_cpu_thread_share_splits_the_cores():
    devices = [parse_device("cpu:0"), parse_device("cpu:1"), parse_device("cpu:2[threads=3]")]
    assert cpu_threads(devices[2], devices) == 3
    assert cpu_threads(devices[0], devices) >= 1


def test_over_cap_placement_fails_before_loading_anything(branchy):
    _, graph = branchy
    devices = [parse_device("cpu:0[mem=1KiB]"), parse_device("cpu:1")]
    with pytest.raises(OutOfMemory, match="cpu:0 needs about .* but its cap is 1.0 KiB") as info:
        PlacedExecutor(graph, Placement.single_device(list(graph.nodes), "cpu:0", devices=["cpu:0", "cpu:1"]), devices)
    assert info.value.peak_memory["cpu:0"] > 1024
    # the same placement fits on the uncapped device
    placement = Placement.single_device(list(graph.nodes), "cpu:1", devices=["cpu:0", "cpu:1"])
    with PlacedExecutor(graph, placement, devices) as executor:
        assert executor.run({"x": _x()})["probs"].shape == (2, 10)


def test_kernel_failure_is_a_kernel_error_naming_the_node(embedding):
    _, graph = embedding
    placement = Placement.single_device(list(graph.nodes), "cpu")
    with PlacedExecutor(graph, placement) as executor:
        with pytest.raises(KernelError, match="embed"):
            executor.run({"ids": np.full((2, 5), 99, dtype=np.int64)})


def test_deadline_is_checked_between_nodes(chain):
    _, graph = chain
    nodes = {n: ("cpu:0" if i < 2 else "cpu:1") for i, n in enumerate(graph.nodes)}
    with PlacedExecutor(graph, Placement(["cpu:0", "cpu:1"], nodes)) as executor:
        with pytest.raises(StepTimeout):
            executor.run({"x": np.ones(256, np.float32)}, timeout_s=1e-9)


def test_placement_errors_are_user_errors(branchy):
    _, graph = branchy
    nodes = {n: "cpu:0" for n in graph.nodes}
    del nodes["head"]
    with pytest.raises(PlacerError, match="does not place 1 node"):
        PlacedExecutor(graph, Placement(["cpu:0"], nodes))
    with pytest.raises(PlacerError, match="not among"):
        PlacedExecutor(graph, Placement.single_device(list(graph.nodes), "cpu:5"), ["cpu:0", "cpu:1"])
    with PlacedExecutor(graph, Placement.single_device(list(graph.nodes), "cpu")) as executor:
        with pytest.raises(PlacerError, match="--input-shape"):
            executor.run({"x": np.zeros((1, 3, 8, 8), np.float32)})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_and_cpu_placement_matches_cpu(branchy):
    _, graph = branchy
    x = _x(2)
    single = _run(graph, {n: "cpu" for n in graph.nodes}, ["cpu"], {"x": x})
    nodes = {n: ("cuda:0" if i % 2 else "cpu") for i, n in enumerate(graph.nodes)}
    placement = Placement(["cuda:0", "cpu"], nodes)
    with PlacedExecutor(graph, placement, ["cuda:0", "cpu"]) as executor:
        out = executor.run({"x": x})
        assert executor.peak_memory["cuda:0"] > 0
    for name, value in single.items():
        np.testing.assert_allclose(out[name].cpu().numpy(), value, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_peak_over_cap_is_out_of_memory(branchy):
    _, graph = branchy
    devices = [parse_device("cuda:0[mem=1KiB]")]
    with pytest.raises(OutOfMemory):
        PlacedExecutor(graph, Placement.single_device(list(graph.nodes), "cuda:0"), devices)


def test_folding_does_not_change_what_is_computed(branchy):
    _, graph = branchy
    x = _x(4)
    outs = []
    for fold in (True, False):
        prepared = prepare(graph, fold=fold)
        assert bool(prepared.folded_nodes) == fold
        nodes = {n: f"cpu:{i % 2}" for i, n in enumerate(graph.nodes)}
        with PlacedExecutor(graph, Placement(["cpu:0", "cpu:1"], nodes), prepared=prepared) as executor:
            outs.append(executor.run({"x": x}))
    for name in outs[0]:
        np.testing.assert_array_equal(outs[0][name].numpy(), outs[1][name].numpy())


def test_outputs_made_only_of_constants_are_returned():
    from onnx import TensorProto, helper, numpy_helper

    from placer.graph.load import load_graph

    from .conftest import make_model

    const = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
    nodes = [helper.make_node("Constant", [], ["k"], value=const, name="const"),
             helper.make_node("Transpose", ["k"], ["kt"], name="transpose"),
             helper.make_node("Relu", ["x"], ["y"], name="relu")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]),
                        helper.make_tensor_value_info("kt", TensorProto.FLOAT, [3, 2])])
    graph = load_graph(model)
    with PlacedExecutor(graph, Placement.single_device(list(graph.nodes), "cpu")) as executor:
        out = executor.run({"x": np.array([-1, 0, 2], np.float32)})
    np.testing.assert_array_equal(out["kt"].numpy(), np.arange(6, dtype=np.float32).reshape(2, 3).T)
    np.testing.assert_array_equal(out["y"].numpy(), [0, 0, 2])


def test_unsupported_ops_are_all_reported_before_anything_runs():
    from onnx import TensorProto, helper

    from placer.kernels.loading import load_graph

    # string ops: outside what a torch runtime can hold, so the test keeps its meaning as kernels grow
    nodes = [helper.make_node("StringNormalizer", ["x"], ["n"], name="normalize", case_change_action="LOWER"),
             helper.make_node("RegexFullMatch", ["n"], ["y"], name="match", pattern="a.*")]
    graph_proto = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.STRING, [3])],
                                    [helper.make_tensor_value_info("y", TensorProto.BOOL, [3])],
                                    value_info=[helper.make_tensor_value_info("n", TensorProto.STRING, [3])])
    model = helper.make_model(graph_proto, ir_version=10, opset_imports=[helper.make_opsetid("", 20)])
    # loading may already refuse it (its shape completion runs kernels); else the executor does
    with pytest.raises(PlacerError, match="2 unsupported.*RegexFullMatch, StringNormalizer"):
        graph = load_graph(model)
        PlacedExecutor(graph, Placement.single_device(list(graph.nodes), "cpu"))
