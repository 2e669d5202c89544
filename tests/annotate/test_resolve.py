"""resolve_placement and parse_device_map: what is refused, with what advice, and what is renamed."""

from __future__ import annotations

import pytest
import torch

from .conftest import diamond_model, placement_json
from placer.annotate.resolve import parse_device_map, resolve_placement
from placer.annotate.write import apply_placement, save_model
from placer.errors import PlacerError
from placer.graph.load import load_graph
from placer.jobs.settings import PlacementSettings
from placer.placement import Placement

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA devices")


def test_parse_device_map_reads_pairs_and_canonicalises():
    assert parse_device_map(["cuda:1=cuda:0", "cuda=cpu"]) == {"cuda:1": "cuda:0", "cuda:0": "cpu"}
    assert parse_device_map([]) == {} and parse_device_map(None) == {}


@pytest.mark.parametrize("bad", ["cuda:1", "=cpu", "cuda:1=", "gpu:0=cpu", "cpu=tpu"])
def test_parse_device_map_refuses_bad_items(bad):
    with pytest.raises(PlacerError):
        parse_device_map([bad])


def test_parse_device_map_refuses_two_targets_for_one_device():
    with pytest.raises(PlacerError, match="two targets"):
        parse_device_map(["cuda:1=cuda:0", "cuda:1=cpu"])


def test_a_placement_for_another_graph_is_refused(diamond_graph):
    data = placement_json(diamond_graph, {}, "cpu:0", ["cpu:0"], sha256="ab" * 32)
    with pytest.raises(PlacerError, match="made for another graph") as err:
        resolve_placement(diamond_graph, Placement.from_dict(data), {})
    assert "\n" not in str(err.value)


def test_a_hand_written_placement_without_hash_is_accepted(diamond_graph):
    data = placement_json(diamond_graph, {"fc": "cpu:1"}, "cpu:0", ["cpu:0", "cpu:1"], sha256=None)
    resolved = resolve_placement(diamond_graph, Placement.from_dict(data), {})
    assert resolved.graph_sha256 == diamond_graph.sha256 and resolved.nodes["fc"] == "cpu:1"


def test_unknown_node_names_are_listed(diamond_graph):
    data = placement_json(diamond_graph, {}, "cpu:0", ["cpu:0"])
    for i in range(7):
        data["nodes"][f"ghost{i}"] = "cpu:0"
    with pytest.raises(PlacerError, match=r"7 node\(s\).*'ghost0'.*and 2 more.*placer inspect"):
        resolve_placement(diamond_graph, Placement.from_dict(data), {})


def test_nodes_missing_from_the_placement_are_listed(diamond_graph):
    data = placement_json(diamond_graph, {}, "cpu:0", ["cpu:0"])
    del data["nodes"]["fc"], data["nodes"]["Relu_0"]
    with pytest.raises(PlacerError, match=r"does not place 2 of the graph's 9 node\(s\): 'Relu_0', 'fc'"):
        resolve_placement(diamond_graph, Placement.from_dict(data), {})


@no_gpu
def test_devices_not_on_this_machine_are_listed_with_a_map_suggestion(diamond_graph):
    data = placement_json(diamond_graph, {"fc": "cuda:1", "pool": "cuda:0"}, "cpu", ["cpu", "cuda:0", "cuda:1"])
    with pytest.raises(PlacerError, match=r"uses cuda:0, cuda:1, which this machine does not have.*"
                                          r"--map cuda:0=cpu --map cuda:1=cpu"):
        resolve_placement(diamond_graph, Placement.from_dict(data), {})


def test_map_renames_and_merges_devices(diamond_graph):
    data = placement_json(diamond_graph, {"fc": "cuda:1", "pool": "cuda:0"}, "cpu", ["cpu", "cuda:0", "cuda:1"])
    resolved = resolve_placement(diamond_graph, Placement.from_dict(data), {"cuda:1": "cpu", "cuda:0": "cpu"})
    assert resolved.devices == ["cpu"] and set(resolved.nodes.values()) == {"cpu"}
    assert list(resolved.nodes) == list(diamond_graph.nodes)


def test_map_of_a_device_the_placement_does_not_use_is_refused(diamond_graph):
    data = placement_json(diamond_graph, {}, "cpu:0", ["cpu:0"])
    with pytest.raises(PlacerError, match="does not use"):
        resolve_placement(diamond_graph, Placement.from_dict(data), {"cuda:3": "cpu:0"})


def test_mixing_plain_and_virtual_cpu_devices_is_refused(diamond_graph):
    data = placement_json(diamond_graph, {"fc": "cpu"}, "cpu:0", ["cpu:0", "cpu"])
    with pytest.raises(PlacerError, match="--map cpu=cpu:0"):
        resolve_placement(diamond_graph, Placement.from_dict(data), {})


def test_writing_annotations_does_not_need_the_devices(diamond_graph):
    data = placement_json(diamond_graph, {"fc": "cuda:7"}, "cpu", ["cpu", "cuda:7"])
    resolved = resolve_placement(diamond_graph, Placement.from_dict(data), {}, check_devices=False)
    assert resolved.nodes["fc"] == "cuda:7"


def test_commands_use_the_placement_stored_in_the_file(tmp_path, diamond_graph, two_cpu_placement):
    path = save_model(apply_placement(diamond_model(), two_cpu_placement, diamond_graph), tmp_path / "placed.onnx")
    graph = load_graph(path)
    assert PlacementSettings().to_run(graph).nodes == two_cpu_placement.nodes
    # an explicit choice still wins over the stored one
    assert set(PlacementSettings(device="cpu:1").to_run(graph).nodes.values()) == {"cpu:1"}


@no_gpu
def test_stored_gpu_placement_on_a_cpu_machine_needs_a_map(tmp_path, diamond_graph):
    gpu = Placement.from_dict(placement_json(diamond_graph, {"conv_a": "cuda:1"}, "cpu", ["cpu", "cuda:1"]))
    path = save_model(apply_placement(diamond_model(), gpu, diamond_graph), tmp_path / "placed.onnx")
    graph = load_graph(path)
    with pytest.raises(PlacerError, match="--map cuda:1=cpu"):
        PlacementSettings().to_run(graph)
    mapped = PlacementSettings(device_map=("cuda:1=cpu",)).to_run(graph)
    assert mapped.devices == ["cpu"] and mapped.nodes["conv_a"] == "cpu"
