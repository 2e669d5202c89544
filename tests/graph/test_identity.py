"""The graph hash placements refer to: it follows what the model computes and ignores what
placer itself writes into files."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from placer.graph.identity import graph_sha256
from placer.graph.load import load_graph

from .conftest import handmade_model


def annotate(model: onnx.ModelProto) -> onnx.ModelProto:
    """What `placer apply` writes: per-node metadata and device configurations, and the
    model's multi-device configuration."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for i, node in enumerate(copy.graph.node):
        node.metadata_props.add(key="placer.device", value=f"cpu:{i % 2}")
        node.metadata_props.add(key="layer_ann", value="stage")
        node.device_configurations.add(configuration_id="placer", pipeline_stage=i % 2)
    copy.configuration.add(name="placer", num_devices=2, device=["cpu:0", "cpu:1"])
    return copy


def test_hash_is_stable_across_loads(cnn_legacy):
    path = cnn_legacy[17]
    assert load_graph(path, {"image": (1, 3, 16, 16)}).sha256 == load_graph(path, {"image": (1, 3, 16, 16)}).sha256
    assert graph_sha256(onnx.load(str(path))) == load_graph(path, {"image": (1, 3, 16, 16)}).sha256


def test_hash_ignores_placer_annotations(cnn_legacy):
    model = onnx.load(str(cnn_legacy[17]))
    assert graph_sha256(annotate(model)) == graph_sha256(model)


def test_hash_keeps_other_node_metadata():
    model = handmade_model()
    marked = onnx.ModelProto()
    marked.CopyFrom(model)
    marked.graph.node[0].metadata_props.add(key="quantization", value="int8")
    assert graph_sha256(marked) != graph_sha256(model)


def test_loaded_and_annotated_model_keeps_the_original_hash(cnn_legacy):
    """A placed model is written from `graph.model` (names filled, shapes bound and inferred)."""
    graph = load_graph(cnn_legacy[13], {"image": (4, 3, 16, 16)})
    assert graph_sha256(graph.model) == graph.sha256
    assert graph_sha256(annotate(graph.model)) == graph.sha256
    assert load_graph(annotate(graph.model)).sha256 == graph.sha256


def test_hash_ignores_node_order_once_names_are_written():
    graph = load_graph(handmade_model())
    shuffled = onnx.ModelProto()
    shuffled.CopyFrom(graph.model)
    nodes = list(shuffled.graph.node)[::-1]
    del shuffled.graph.node[:]
    shuffled.graph.node.extend(nodes)
    assert graph_sha256(shuffled) == graph.sha256 == graph_sha256(graph.model) == graph_sha256(handmade_model())


def test_hash_changes_with_weights_ops_and_names(cnn_legacy):
    model = onnx.load(str(cnn_legacy[17]))
    base = graph_sha256(model)

    heavier = onnx.ModelProto()
    heavier.CopyFrom(model)
    weight = heavier.graph.initializer[0]
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) + 1, weight.name))
    assert graph_sha256(heavier) != base

    other_op = onnx.ModelProto()
    other_op.CopyFrom(model)
    relu = next(n for n in other_op.graph.node if n.op_type == "Relu")
    relu.op_type = "Sigmoid"
    assert graph_sha256(other_op) != base

    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    renamed.graph.node[0].name = "something_else"
    assert graph_sha256(renamed) != base


def test_hash_ignores_how_weights_are_stored(cnn_legacy, external_data):
    model = onnx.load(str(cnn_legacy[17]))
    typed = onnx.ModelProto()
    typed.CopyFrom(model)
    for t in typed.graph.initializer:  # float_data instead of raw_data
        array = numpy_helper.to_array(t)
        if array.dtype == np.float32:
            t.ClearField("raw_data")
            t.float_data.extend(array.ravel().tolist())
    assert graph_sha256(typed) == graph_sha256(model) == graph_sha256(onnx.load(str(external_data)))


def test_hash_sees_through_local_functions():
    f = TensorProto.FLOAT
    function = helper.make_function(
        "local", "Swish", ["x"], ["y"],
        [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
        opset_imports=[helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("Swish", ["a"], ["b"], domain="local", name="swish")],
                              "fn", [helper.make_tensor_value_info("a", f, [2, 3])],
                              [helper.make_tensor_value_info("b", f, [2, 3])])
    model = helper.make_model(graph, functions=[function],
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    loaded = load_graph(model)
    assert [n.op_type for n in loaded.nodes.values()] == ["Sigmoid", "Mul"]
    assert graph_sha256(loaded.model) == loaded.sha256 == graph_sha256(model)
