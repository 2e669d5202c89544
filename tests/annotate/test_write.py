"""apply_placement: what it writes into the model, and what it leaves alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from .conftest import diamond_model, placement_json
from placer.annotate.keys import CONFIG_NAME, DEVICE_KEY, GRAPH_SHA_KEY, LAYER_KEY, MEASUREMENT_KEY
from placer.annotate.write import apply_placement, ort_layer_settings, save_model
from placer.errors import PlacerError
from placer.graph.load import load_graph
from placer.placement import Placement


def _meta(props) -> dict[str, str]:
    return {e.key: e.value for e in props}


def test_every_node_gets_its_device_and_layer_annotation(diamond_graph, two_cpu_placement):
    placed = apply_placement(diamond_model(), two_cpu_placement, diamond_graph)
    for node in placed.graph.node:
        meta = _meta(node.metadata_props)
        assert meta[DEVICE_KEY] == two_cpu_placement.nodes[node.name]
        assert meta[LAYER_KEY] == "cpu"


def test_nameless_nodes_get_the_loaders_generated_names(diamond_graph, two_cpu_placement):
    original = diamond_model()
    assert sum(1 for n in original.graph.node if not n.name) == 3
    placed = apply_placement(original, two_cpu_placement, diamond_graph)
    assert [n.name for n in placed.graph.node] == list(diamond_graph.nodes)
    assert all(n.name for n in placed.graph.node)


def test_multi_device_configuration_names_devices_and_node_indices(diamond_graph, two_cpu_placement):
    placed = apply_placement(diamond_model(), two_cpu_placement, diamond_graph)
    (config,) = [c for c in placed.configuration if c.name == CONFIG_NAME]
    assert list(config.device) == ["cpu:0", "cpu:1"] and config.num_devices == 2
    for node in placed.graph.node:
        (node_config,) = node.device_configurations
        assert node_config.configuration_id == CONFIG_NAME
        expected = list(config.device).index(two_cpu_placement.nodes[node.name])
        tensors = [s.tensor_name for s in node_config.sharding_spec]
        assert tensors == list(dict.fromkeys([t for t in node.input if t] + list(node.output)))
        assert all(list(s.device) == [expected] and not s.sharded_dim for s in node_config.sharding_spec)
    stages = {n.name: n.device_configurations[0].pipeline_stage for n in placed.graph.node}
    assert stages["conv1"] == 0 and stages["conv_a"] == 1 and stages["fc"] == 2


def test_ir_version_is_raised_to_11_and_checker_passes(diamond_graph, two_cpu_placement):
    original = diamond_model(ir_version=8)
    placed = apply_placement(original, two_cpu_placement, diamond_graph)
    assert placed.ir_version == 11
    onnx.checker.check_model(placed, full_check=True)


def test_weights_inputs_outputs_and_original_are_unchanged(diamond_graph, two_cpu_placement):
    original = diamond_model()
    before = original.SerializeToString()
    placed = apply_placement(original, two_cpu_placement, diamond_graph)
    assert original.SerializeToString() == before
    assert [t.SerializeToString() for t in placed.graph.initializer] == \
        [t.SerializeToString() for t in original.graph.initializer]
    assert placed.graph.input == original.graph.input and placed.graph.output == original.graph.output
    assert [(n.op_type, list(n.input), list(n.output), n.attribute) for n in placed.graph.node] == \
        [(n.op_type, list(n.input), list(n.output), n.attribute) for n in original.graph.node]


def test_model_metadata_records_graph_hash_and_measurement(diamond_graph, two_cpu_placement):
    two_cpu_placement.measurement = {"step_time": 0.0123, "ok": True}
    placed = apply_placement(diamond_model(), two_cpu_placement, diamond_graph)
    meta = _meta(placed.metadata_props)
    assert meta[GRAPH_SHA_KEY] == diamond_graph.sha256
    assert '"step_time": 0.0123' in meta[MEASUREMENT_KEY]


def test_applying_again_replaces_the_previous_placement(diamond_graph, two_cpu_placement):
    once = apply_placement(diamond_model(), two_cpu_placement, diamond_graph)
    everything_on_1 = Placement.single_device(list(diamond_graph.nodes), "cpu:1", diamond_graph.sha256)
    twice = apply_placement(once, everything_on_1, diamond_graph)
    assert [c.name for c in twice.configuration] == [CONFIG_NAME]
    assert list(twice.configuration[0].device) == ["cpu:1"]
    for node in twice.graph.node:
        assert len(node.device_configurations) == 1
        assert [e.key for e in node.metadata_props].count(DEVICE_KEY) == 1
        assert _meta(node.metadata_props)[DEVICE_KEY] == "cpu:1"


def test_another_tools_configuration_is_kept(diamond_graph, two_cpu_placement):
    original = diamond_model(ir_version=11)
    original.configuration.add(name="tensor_parallel", num_devices=4)
    placed = apply_placement(original, two_cpu_placement, diamond_graph)
    assert sorted(c.name for c in placed.configuration) == [CONFIG_NAME, "tensor_parallel"]


def test_a_placement_missing_nodes_is_refused(diamond_graph):
    partial = Placement(devices=["cpu:0"], nodes={"conv1": "cpu:0"})
    with pytest.raises(PlacerError, match="does not place 8 node"):
        apply_placement(diamond_model(), partial, diamond_graph)


def test_a_model_that_is_not_the_graphs_is_refused(diamond_graph, two_cpu_placement):
    other = diamond_model()
    other.graph.node[0].output[0] = "renamed"
    other.graph.node[1].input[0] = "renamed"
    other.graph.node[0].name = "not_conv1"
    with pytest.raises(PlacerError, match="is not in the graph"):
        apply_placement(other, two_cpu_placement, diamond_graph)


def test_ort_settings_name_each_used_device_kind_once():
    p = Placement(devices=["cuda:0", "cuda:1", "cpu"], nodes={"a": "cuda:0", "b": "cpu", "c": "cuda:1"})
    assert ort_layer_settings(p) == "cuda(=cuda); cpu(=cpu)"
    only_cpu = Placement(devices=["cuda:0", "cpu:0", "cpu:1"], nodes={"a": "cpu:0", "b": "cpu:1"})
    assert ort_layer_settings(only_cpu) == "cpu(=cpu)"


def test_local_functions_are_inlined_so_every_op_is_placed(tmp_path):
    square = helper.make_function("local", "Square", ["v"], ["w"],
                                  [helper.make_node("Mul", ["v", "v"], ["w"])],
                                  opset_imports=[helper.make_opsetid("", 17)])
    graph = helper.make_graph(
        [helper.make_node("Square", ["x"], ["s"], domain="local", name="sq"),
         helper.make_node("Add", ["s", "k"], ["y"], name="add")],
        "fn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.ones(3, np.float32), "k")])
    model = helper.make_model(graph, functions=[square], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    graph_ = load_graph(model)
    placement = Placement.from_dict(placement_json(graph_, {"add": "cpu:1"}, "cpu:0", ["cpu:0", "cpu:1"]))
    placed = apply_placement(model, placement, graph_)
    assert not placed.functions
    assert [n.op_type for n in placed.graph.node] == ["Mul", "Add"]
    assert [_meta(n.metadata_props)[DEVICE_KEY] for n in placed.graph.node] == ["cpu:0", "cpu:1"]
    assert load_graph(placed).sha256 == graph_.sha256
    save_model(placed, tmp_path / "fn.onnx")


def test_save_model_checks_the_written_file(tmp_path, diamond_graph, two_cpu_placement):
    placed = apply_placement(diamond_model(), two_cpu_placement, diamond_graph)
    path = save_model(placed, tmp_path / "sub" / "placed.onnx")
    assert onnx.load(path).graph.node[0].name == "conv1"
    broken = onnx.ModelProto()
    broken.CopyFrom(placed)
    broken.graph.node[0].input[0] = "nowhere"
    with pytest.raises(PlacerError, match="fails onnx.checker"):
        save_model(broken, tmp_path / "broken.onnx")
