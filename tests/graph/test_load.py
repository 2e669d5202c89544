"""Loading real-world ONNX files into an `OpGraph`: every kind the issue lists loads, every node
output gets the static shape a real onnxruntime run gives, names and order are stable."""

from __future__ import annotations

import networkx as nx
import numpy as np
import onnx
import pytest

from placer.graph.load import load_graph
from placer.graph.feeds import random_feeds

from .conftest import control_flow_model, handmade_model, ort_shapes


def assert_complete_and_true(graph, feeds=None):
    """Every tensor static, and every node output's shape equal to a real onnxruntime run's."""
    for node in graph.nodes.values():
        assert len(node.output_info) == len([o for o in node.outputs if o]), node.name
        for info in node.output_info:
            assert all(isinstance(d, int) and d >= 0 for d in info.shape), (node.name, info)
            assert np.dtype(info.dtype)  # a real dtype
    feeds = feeds or random_feeds(graph)
    truth = ort_shapes(graph.model, feeds)
    for node in graph.nodes.values():
        for info in node.output_info:
            assert info.shape == truth[info.name], (node.name, info.name, info.shape, truth[info.name])


@pytest.mark.parametrize("opset", [11, 13, 17, 21])
def test_legacy_export_loads_at_every_opset(cnn_legacy, opset):
    graph = load_graph(cnn_legacy[opset], {"image": (3, 3, 16, 16)})
    assert graph.opsets[""] == opset
    assert {n.opset for n in graph.nodes.values()} == {opset}
    assert graph.inputs[0].shape == (3, 3, 16, 16)
    assert [o.shape for o in graph.outputs] == [(3, 10), (3, 16)]
    assert "Conv" in {n.op_type for n in graph.nodes.values()}
    assert_complete_and_true(graph)


def test_dynamo_export_loads(cnn_dynamo):
    graph = load_graph(cnn_dynamo, {"image": (5, 3, 16, 16)})
    assert [o.shape for o in graph.outputs] == [(5, 10), (5, 16)]
    assert not graph.model.functions  # local functions inlined: every op is a vertex
    assert_complete_and_true(graph)


def test_symbol_shared_by_two_inputs_is_bound_once(block_dynamo):
    graph = load_graph(block_dynamo, {"x": (3, 7, 8)})
    shapes = {t.name: t.shape for t in graph.inputs}
    assert shapes == {"x": (3, 7, 8), "mask": (3, 7)}
    assert graph.outputs[0].shape == (3, 7, 8)
    assert_complete_and_true(graph)


def test_paddle_style_file_with_hundreds_of_constants_loads(paddle_style):
    graph = load_graph(paddle_style, {"x": (4, 3, 16, 16)})
    # the float Constants are its weights: initializers now, no longer nodes; the int64 ones stay
    assert len(graph.constants) > 200 and set(graph.constants.values()) <= set(graph.initializers)
    assert [n.name for n in graph.nodes.values() if n.op_type == "Constant"] == ["Constant_237", "Constant_238"]
    assert graph.outputs[0].shape == (4, 5)  # p2o.DynamicDimension.1 resolved through Shape/Gather
    assert graph.nodes["reshape2_0"].output_shapes == ((4, 1024),)
    assert_complete_and_true(graph)


def test_yolo_style_head_with_split_resize_range_expand_loads(yolo_head):
    graph = load_graph(yolo_head, {"images": (2, 3, 64, 48)})
    ops = {n.op_type for n in graph.nodes.values()}
    assert {"Split", "Resize", "Range", "Expand"} <= ops
    assert [o.shape for o in graph.outputs] == [(2, 3 * 32 * 24, 6), (2, 18, 64, 48)]
    assert_complete_and_true(graph)


def test_crnn_with_lstm_op_loads(crnn):
    graph = load_graph(crnn, {"image": (2, 1, 8, 40)})
    lstm = [n for n in graph.nodes.values() if n.op_type == "LSTM"]
    assert len(lstm) == 1
    # Y is (seq, directions, batch, hidden): one step per image column.
    assert lstm[0].output_info[0].shape == (40, 2, 2, 16)
    assert graph.outputs[0].shape == (40, 2, 20)
    assert lstm[0].param_bytes > 0 and lstm[0].flops > 0
    assert_complete_and_true(graph)


def test_nameless_nodes_get_stable_unique_names(handmade):
    first, second = load_graph(handmade), load_graph(handmade)
    assert list(first.nodes) == list(second.nodes)
    names = list(first.nodes)
    assert len(set(names)) == len(names) == 7
    assert "Relu_0" in names and "dup" in names          # file names kept
    assert {"Split_0", "TopK_0", "Relu_1", "Relu_2", "dup_0"} <= set(names)
    assert all(n.name for n in first.model.graph.node)


def test_names_survive_being_written_back(handmade):
    graph = load_graph(handmade)
    again = load_graph(graph.model)  # names now stored in the file
    assert list(again.nodes) == list(graph.nodes)
    assert again.sha256 == graph.sha256


def test_several_outputs_and_multi_output_nodes(handmade):
    graph = load_graph(handmade)
    assert [o.name for o in graph.outputs] == ["out", "idx", "s1"]
    assert [o.shape for o in graph.outputs] == [(2, 3), (2, 3), (2, 4)]
    assert [o.dtype for o in graph.outputs] == ["float32", "int64", "float32"]
    split = graph.nodes["Split_0"]
    assert split.output_shapes == ((2, 4), (2, 4))
    assert graph.dag.edges["Split_0", "Relu_0"]["tensors"] == ["s0", "s1"]
    assert graph.dag.edges["Split_0", "Relu_0"]["bytes"] == 2 * 2 * 4 * 4
    assert_complete_and_true(graph)


def test_order_is_file_order_when_already_topological(cnn_legacy):
    graph = load_graph(cnn_legacy[13], {"image": (1, 3, 16, 16)})
    file_names = [n.name for n in onnx.load(str(cnn_legacy[13])).graph.node]
    assert list(graph.nodes) == file_names


def test_unsorted_file_is_sorted_deterministically():
    model = handmade_model()
    shuffled = list(model.graph.node)[::-1]
    del model.graph.node[:]
    model.graph.node.extend(shuffled)
    graph = load_graph(model)
    position = {n: i for i, n in enumerate(graph.nodes)}
    assert all(position[u] < position[v] for u, v in graph.dag.edges)
    assert list(graph.nodes) == list(load_graph(model).nodes)
    assert [n.name for n in graph.model.graph.node] == list(graph.nodes)


def test_dag_has_one_vertex_per_node_and_tensor_edges(cnn_legacy):
    graph = load_graph(cnn_legacy[17], {"image": (2, 3, 16, 16)})
    assert set(graph.dag.nodes) == set(graph.nodes)
    assert nx.is_directed_acyclic_graph(graph.dag)
    for name in graph.dag.nodes:
        assert graph.dag.nodes[name]["op"] is graph.nodes[name]
    for u, v, data in graph.dag.edges(data=True):
        assert data["tensors"] and all(graph.producer[t] == u for t in data["tensors"])
        assert data["bytes"] == sum(graph.tensors[t].nbytes for t in data["tensors"])
    # graph inputs and weights are attributes, not vertices
    assert "image" not in graph.dag and not set(graph.initializers) & set(graph.dag.nodes)
    assert graph.initializers and graph.total_param_bytes == sum(t.nbytes for t in graph.initializers.values())


def test_control_flow_ops_are_single_vertices_depending_on_outer_reads():
    graph = load_graph(control_flow_model())
    assert list(graph.nodes) == ["relu", "total", "positive", "if", "loop"]
    assert graph.nodes["if"].implicit_inputs == ("h",)
    assert graph.nodes["loop"].implicit_inputs == ("h",)
    assert graph.dag.has_edge("relu", "if") and graph.dag.edges["relu", "if"]["tensors"] == ["h"]
    assert graph.dag.has_edge("relu", "loop")
    assert graph.nodes["loop"].output_shapes == ((2, 4),)


def test_external_data_loads_with_weights(external_data, cnn_legacy):
    graph = load_graph(external_data, {"image": (1, 3, 16, 16)})
    plain = load_graph(cnn_legacy[17], {"image": (1, 3, 16, 16)})
    assert graph.total_param_bytes == plain.total_param_bytes > 0
    name = next(iter(graph.initializers))
    np.testing.assert_array_equal(graph.initializer_array(name), plain.initializer_array(name))
    assert graph.sha256 == plain.sha256  # storage does not change the identity


def test_loading_a_model_proto_leaves_it_unchanged(handmade):
    model = onnx.load(str(handmade))
    before = model.SerializeToString()
    load_graph(model)
    assert model.SerializeToString() == before


def test_large_weights_go_around_the_serialising_passes(monkeypatch, cnn_legacy):
    """Weights above the slim threshold never pass through checker/inference (the route that
    lets models over protobuf's 2 GB load); the result is the same either way."""
    from placer.graph import slim

    full = load_graph(cnn_legacy[17], {"image": (2, 3, 16, 16)})
    moved = slim.slim_copy(onnx.load(str(cnn_legacy[17])))[1]
    monkeypatch.setattr(slim, "SMALL_INITIALIZER_BYTES", 0)
    all_moved = slim.slim_copy(onnx.load(str(cnn_legacy[17])))[1]
    assert len(all_moved) > len(moved)
    lean = load_graph(cnn_legacy[17], {"image": (2, 3, 16, 16)})
    assert lean.sha256 != full.sha256   # the threshold says which weights the hash takes by shape
    assert {n: v.output_shapes for n, v in lean.nodes.items()} == {n: v.output_shapes for n, v in full.nodes.items()}
    assert [t.name for t in lean.model.graph.initializer] == [t.name for t in full.model.graph.initializer]
    assert not {i.name for i in lean.model.graph.input} & set(all_moved) - {i.name for i in full.model.graph.input}


@pytest.mark.parametrize("outputs", [["y", "w"], ["y", "x"], ["y", "w", "x"]])
def test_an_output_that_is_an_input_or_initializer_keeps_its_shape(outputs):
    """y = x * w * w: ONNX inference takes an output's declared type for the tensor everywhere,
    so clearing w's or x's shape there lost a's (its readers') too. w's declared shape is symbolic:
    the initializer's is taken."""
    from onnx import TensorProto, helper, numpy_helper

    declared = {"y": [8], "x": [8], "w": ["n"]}
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["a"], name="m1"), helper.make_node("Mul", ["a", "w"], ["y"], name="m2")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, declared[n]) for n in outputs],
        [numpy_helper.from_array(np.ones(8, np.float32), "w")]), opset_imports=[helper.make_opsetid("", 17)])
    graph = load_graph(model)
    assert [(o.name, o.shape) for o in graph.outputs] == [(n, (8,)) for n in outputs]
    assert graph.tensors["a"].shape == (8,)
