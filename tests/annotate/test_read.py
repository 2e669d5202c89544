"""read_placement: a written placement comes back, and the graph keeps its identity."""

from __future__ import annotations

import onnx
import pytest

from .conftest import diamond_model
from placer.annotate.keys import DEVICE_KEY
from placer.annotate.read import read_placement
from placer.annotate.write import apply_placement, save_model
from placer.errors import PlacerError
from placer.graph.load import load_graph


def test_a_model_without_annotations_has_no_placement():
    assert read_placement(diamond_model()) is None


def test_written_placement_reads_back_equal(diamond_graph, two_cpu_placement):
    two_cpu_placement.measurement = {"step_time": 0.5}
    placed = apply_placement(diamond_model(), two_cpu_placement, diamond_graph)
    back = read_placement(placed)
    assert back.nodes == two_cpu_placement.nodes
    assert back.devices == ["cpu:0", "cpu:1"]
    assert back.graph_sha256 == diamond_graph.sha256
    assert back.measurement == {"step_time": 0.5}


def test_device_list_keeps_devices_that_hold_no_node(diamond_graph):
    from placer.placement import Placement

    p = Placement.single_device(list(diamond_graph.nodes), "cpu:1", diamond_graph.sha256, devices=["cpu:0", "cpu:1"])
    back = read_placement(apply_placement(diamond_model(), p, diamond_graph))
    assert back.devices == ["cpu:0", "cpu:1"] and set(back.nodes.values()) == {"cpu:1"}


def test_applied_file_loads_with_the_same_hash_and_names(tmp_path, diamond_graph, two_cpu_placement):
    path = save_model(apply_placement(diamond_model(), two_cpu_placement, diamond_graph), tmp_path / "placed.onnx")
    again = load_graph(path)
    assert again.sha256 == diamond_graph.sha256
    assert list(again.nodes) == list(diamond_graph.nodes)
    assert read_placement(again.model).nodes == two_cpu_placement.nodes


def test_standard_multi_device_annotations_alone_are_read(diamond_graph, two_cpu_placement):
    placed = apply_placement(diamond_model(), two_cpu_placement, diamond_graph)
    for node in placed.graph.node:  # as another tool would write it: no placer metadata
        keep = [e for e in node.metadata_props if e.key != DEVICE_KEY]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    placed.configuration[0].name = "pipeline"
    for node in placed.graph.node:
        node.device_configurations[0].configuration_id = "pipeline"
    back = read_placement(placed)
    assert back is not None and back.nodes == two_cpu_placement.nodes


def test_sharded_nodes_are_not_read_as_placed(diamond_graph, two_cpu_placement):
    placed = apply_placement(diamond_model(), two_cpu_placement, diamond_graph)
    for node in placed.graph.node:
        keep = [e for e in node.metadata_props if e.key != DEVICE_KEY]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    spec = placed.graph.node[0].device_configurations[0].sharding_spec[0]
    spec.device[:] = [0, 1]
    spec.sharded_dim.add(axis=0).simple_sharding.add(num_shards=2)
    back = read_placement(placed)
    assert placed.graph.node[0].name not in back.nodes and len(back.nodes) == len(placed.graph.node) - 1


def test_annotated_node_without_a_name_is_an_error(diamond_graph, two_cpu_placement):
    placed = apply_placement(diamond_model(), two_cpu_placement, diamond_graph)
    placed.graph.node[1].name = ""
    with pytest.raises(PlacerError, match="no name"):
        read_placement(placed)


def test_reading_a_saved_model_roundtrips_through_protobuf(tmp_path, diamond_graph, two_cpu_placement):
    path = save_model(apply_placement(diamond_model(), two_cpu_placement, diamond_graph), tmp_path / "p.onnx")
    assert read_placement(onnx.load(path)).nodes == two_cpu_placement.nodes


def test_duplicate_node_names_round_trip_as_the_loader_renames_them(tmp_path):
    model = diamond_model()
    model.graph.node[2].name = "conv1"       # conv_a now repeats conv1's name
    graph = load_graph(model)
    from placer.placement import Placement

    names = list(graph.nodes)
    assert len(set(names)) == len(names) == 9
    p = Placement(devices=["cpu:0", "cpu:1"], nodes={n: "cpu:1" if i % 2 else "cpu:0" for i, n in enumerate(names)},
                  graph_sha256=graph.sha256)
    path = save_model(apply_placement(model, p, graph), tmp_path / "placed.onnx")
    again = load_graph(path)
    assert again.sha256 == graph.sha256 and list(again.nodes) == names
    assert read_placement(again.model).nodes == p.nodes
