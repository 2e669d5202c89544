"""Stage planning and --split: per-device models that, chained, compute the original outputs."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from .conftest import diamond_model, feeds_for, if_model, ort_run, placement_json
from placer.annotate.split import split_model, write_split
from placer.annotate.stages import plan_stages
from placer.annotate.write import apply_placement
from placer.errors import PlacerError
from placer.graph.load import load_graph
from placer.placement import Placement

pytest.importorskip("onnxruntime")


def test_non_contiguous_device_nodes_make_one_stage_per_run(diamond_graph, two_cpu_placement):
    stages = plan_stages(diamond_graph, two_cpu_placement)
    assert [(s.device, s.nodes) for s in stages] == [
        ("cpu:0", ["conv1", "Relu_0", "Sigmoid_0"]),
        ("cpu:1", ["conv_a", "mul"]),
        ("cpu:0", ["Add_0", "pool", "flatten", "fc"]),
    ]
    assert stages[0].inputs == ["x"] and stages[0].outputs == ["r1", "b"]   # b is also a graph output
    assert stages[1].inputs == ["r1", "b"] and stages[1].initializers == ["w2"]
    assert stages[2].inputs == ["m", "r1"] and stages[2].outputs == ["y"]


def test_independent_branches_on_one_device_share_a_stage(diamond_graph):
    # Sigmoid comes after conv_a in topological order, yet needs nothing from cpu:1: it joins
    # cpu:0's first stage instead of making a stage of its own.
    p = Placement.from_dict(placement_json(diamond_graph, {"conv_a": "cpu:1"}, "cpu:0", ["cpu:0", "cpu:1"]))
    assert [s.device for s in plan_stages(diamond_graph, p)] == ["cpu:0", "cpu:1", "cpu:0"]
    assert "Sigmoid_0" in plan_stages(diamond_graph, p)[0].nodes


def test_single_device_placement_is_one_stage_holding_all_weights(diamond_graph):
    p = Placement.single_device(list(diamond_graph.nodes), "cpu", diamond_graph.sha256)
    (stage,) = plan_stages(diamond_graph, p)
    assert stage.inputs == ["x"] and stage.outputs == ["b", "y"] and len(stage.initializers) == 5


def test_split_writes_checked_models_and_a_chaining_index(tmp_path, diamond_graph, two_cpu_placement):
    placed = apply_placement(diamond_model(), two_cpu_placement, diamond_graph)
    index_path = write_split(placed, two_cpu_placement, diamond_graph, tmp_path / "parts")
    index = json.loads(index_path.read_text())
    assert index["format"] == "placer.split/1" and index["graph"]["sha256"] == diamond_graph.sha256
    assert index["inputs"] == ["x"] and index["outputs"] == ["y", "b"]
    assert [s["device"] for s in index["stages"]] == ["cpu:0", "cpu:1", "cpu:0"]
    for entry in index["stages"]:
        model = onnx.load(tmp_path / "parts" / entry["file"])
        onnx.checker.check_model(model, full_check=True)
        assert [v.name for v in model.graph.input] == entry["inputs"]
        assert [v.name for v in model.graph.output] == entry["outputs"]
        assert len(model.graph.node) == entry["nodes"]
    weights = {t.name for e in index["stages"] for t in onnx.load(tmp_path / "parts" / e["file"]).graph.initializer}
    assert weights == {"w1", "b1", "w2", "wfc", "bfc"}


def test_chained_stages_in_ort_give_the_original_outputs(tmp_path, diamond_graph, two_cpu_placement):
    from placer.annotate.chain import run_split

    placed = apply_placement(diamond_model(), two_cpu_placement, diamond_graph)
    write_split(placed, two_cpu_placement, diamond_graph, tmp_path / "parts")
    feeds = feeds_for(diamond_graph)
    expected = ort_run(diamond_model(), feeds)
    got = run_split(tmp_path / "parts", feeds)
    assert set(got) == {"y", "b"}
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-6)


def test_stage_models_keep_the_files_dynamic_dimensions(tmp_path, two_cpu_placement):
    from placer.annotate.chain import run_split

    model = diamond_model(batch="N")
    graph = load_graph(model, {"x": (2, 3, 8, 8)})
    stages = split_model(apply_placement(model, two_cpu_placement, graph), two_cpu_placement, graph)
    r1 = next(v for v in stages[1].model.graph.input if v.name == "r1")
    assert [d.dim_param or d.dim_value for d in r1.type.tensor_type.shape.dim] == ["N", 4, 8, 8]
    write_split(apply_placement(model, two_cpu_placement, graph), two_cpu_placement, graph, tmp_path / "parts")
    feeds = {"x": np.random.default_rng(3).standard_normal((5, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_allclose(run_split(tmp_path / "parts", feeds)["y"], ort_run(model, feeds)["y"],
                               rtol=1e-6, atol=1e-6)


def test_subgraph_outer_reads_cross_stages(tmp_path):
    from placer.annotate.chain import run_split

    model = if_model()
    graph = load_graph(model)
    # `h` reaches the If only through its branches' outer-scope reads.
    p = Placement.from_dict(placement_json(graph, {"branch": "cpu:1"}, "cpu:0", ["cpu:0", "cpu:1"]))
    stages = plan_stages(graph, p)
    branch_stage = next(s for s in stages if "branch" in s.nodes)
    assert "h" in branch_stage.inputs
    write_split(apply_placement(model, p, graph), p, graph, tmp_path / "parts")
    for sign in (1.0, -1.0):
        feeds = {"x": sign * np.abs(feeds_for(graph)["x"])}
        np.testing.assert_array_equal(run_split(tmp_path / "parts", feeds)["y"], ort_run(model, feeds)["y"])


def test_split_into_a_file_path_is_refused(tmp_path, diamond_graph, two_cpu_placement):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(PlacerError, match="is a file"):
        write_split(diamond_model(), two_cpu_placement, diamond_graph, blocker)
