"""What `placer inspect` reports: totals, histogram, critical path, JSON with every node."""

from __future__ import annotations

import json

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from placer.graph.load import load_graph
from placer.graph.summary import critical_path, format_summary, summarize, to_json


def diamond():
    """x -> a (MatMul, heavy) -> d;  x -> b (Relu) -> c (Relu) -> d (Add). The heavy branch wins
    the critical path although it has fewer nodes."""
    f = TensorProto.FLOAT
    w = numpy_helper.from_array(np.ones((16, 16), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["ya"], name="a"),
         helper.make_node("Relu", ["x"], ["yb"], name="b"),
         helper.make_node("Relu", ["yb"], ["yc"], name="c"),
         helper.make_node("Add", ["ya", "yc"], ["y"], name="d")],
        "diamond", [helper.make_tensor_value_info("x", f, ["n", 16])], [helper.make_tensor_value_info("y", f, ["n", 16])],
        initializer=[w])
    return load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {"x": (4, 16)})


def test_critical_path_follows_flops_not_node_count():
    graph = diamond()
    path, flops = critical_path(graph)
    assert path == ["a", "d"]
    assert flops == 2 * 4 * 16 * 16 + 4 * 16


def test_summary_totals():
    s = summarize(diamond())
    assert s.node_count == 4
    assert s.op_histogram == {"Relu": 2, "Add": 1, "MatMul": 1}
    assert s.param_count == 256 and s.param_bytes == 1024
    assert s.flops == 2 * 4 * 16 * 16 + 3 * 64
    assert s.activation_bytes == 4 * 64 * 4
    assert [(t.name, t.shape) for t in s.inputs] == [("x", (4, 16))]


def test_text_report_names_inputs_and_path(cnn_legacy):
    text = format_summary(summarize(load_graph(cnn_legacy[17], {"image": (2, 3, 16, 16)})))
    assert "image" in text and "2x3x16x16" in text
    assert "critical path by FLOPs" in text and "Conv" in text
    assert text.count("\n") < 60


def test_json_lists_every_node_and_the_hash(handmade):
    graph = load_graph(handmade)
    data = json.loads(json.dumps(to_json(graph)))  # JSON-serialisable as is
    assert data["graph"]["sha256"] == graph.sha256
    assert [n["name"] for n in data["nodes"]] == list(graph.nodes)
    split = next(n for n in data["nodes"] if n["name"] == "Split_0")
    assert split["op_type"] == "Split" and split["output_shapes"] == [[2, 4], [2, 4]]
    assert data["inputs"] == [{"name": "a", "shape": [2, 8], "dtype": "float32"}]
