"""Plans as plain data: DTensor's layouts, the splits an op's maths allows, the versioned JSON file,
and every placement a plan, losslessly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.errors import PlacerError
from placer.graph.load import load_graph
from placer.placement import Placement
from placer.plans.check import op_splits
from placer.plans.layout import PARTIAL, REPLICATE, Shard, parse_layout, piece_shape
from placer.plans.plan import OpPlan, Plan
from placer.plans.rules import splits
from plancases import matmul_relu


def test_layouts_read_and_write_as_dtensor_names_them():
    for text, layout in [("Shard(0)", Shard(0)), ("Shard(dim=2)", Shard(2)), ("Replicate()", REPLICATE),
                         ("Partial()", PARTIAL)]:
        assert parse_layout(text) == layout
    assert [str(x) for x in (Shard(1), REPLICATE, PARTIAL)] == ["Shard(1)", "Replicate()", "Partial()"]
    with pytest.raises(PlacerError, match="write Shard"):
        parse_layout("S(0)")


def test_a_shard_is_a_balanced_slice_as_numpy_array_split_cuts():
    cut = [piece_shape((10, 3), Shard(0), k, 4) for k in range(4)]
    assert cut == [(len(a), 3) for a in np.array_split(np.zeros((10, 3)), 4)]
    assert piece_shape((10, 3), REPLICATE, 1, 4) == piece_shape((10, 3), PARTIAL, 1, 4) == (10, 3)


def layouts(graph, node: str) -> set[tuple]:
    return {(s.inputs, s.outputs) for s in splits(graph.nodes[node], graph)}


def test_matmul_splits_its_rows_its_output_features_or_its_reduced_axis():
    graph = matmul_relu(8, 16, 32)
    assert layouts(graph, "mm0") == {((Shard(0), REPLICATE), (Shard(0),)),      # data parallel
                                     ((REPLICATE, Shard(1)), (Shard(1),)),      # output features
                                     ((Shard(1), Shard(0)), (PARTIAL,))}        # reduced axis


def conv_model(group: int = 1, bias: bool = True):
    w = numpy_helper.from_array(np.ones((8, 4 // group, 3, 3), np.float32), "w")
    b = numpy_helper.from_array(np.ones(8, np.float32), "b")
    bias_vec = numpy_helper.from_array(np.ones((8, 1, 1), np.float32), "c")
    nodes = [helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["y"], name="conv", group=group,
                              pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["y", "c"], ["z"], name="add")]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 5, 5])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 8, 5, 5])],
                              [w, b, bias_vec])
    return load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_conv_splits_its_batch_or_its_output_channels_and_element_wise_ops_follow_their_input():
    graph = conv_model()
    assert layouts(graph, "conv") == {((Shard(0), REPLICATE, REPLICATE), (Shard(0),)),
                                      ((REPLICATE, Shard(0), Shard(0)), (Shard(1),))}
    # the bias (8, 1, 1) spans the channels, and is broadcast along the batch and the pixels
    assert layouts(graph, "add") == {((Shard(0), REPLICATE), (Shard(0),)), ((Shard(1), Shard(0)), (Shard(1),)),
                                     ((Shard(2), REPLICATE), (Shard(2),)), ((Shard(3), REPLICATE), (Shard(3),))}
    grouped = conv_model(group=2)   # a grouped conv's channels are not independent of each other
    assert layouts(grouped, "conv") == {((Shard(0), REPLICATE, REPLICATE), (Shard(0),))}
    assert ((Shard(1), Shard(1)), (PARTIAL,)) in layouts(conv_model(bias=False), "conv")


def test_a_plan_may_split_an_op_only_as_its_maths_allows():
    graph = matmul_relu(8, 16, 32)
    devices = ("cuda:0", "cuda:1")
    ok = Plan(list(devices), {"mm0": OpPlan(devices, (Shard(0), REPLICATE), (Shard(0),)), "relu0": OpPlan(devices)})
    assert op_splits(graph, ok)["mm0"].name == "rows"
    assert op_splits(graph, ok)["relu0"].name == "replicate"
    wrong = Plan(list(devices), {"mm0": OpPlan(devices, (Shard(0), Shard(0)), (Shard(0),)), "relu0": OpPlan(devices)})
    with pytest.raises(PlacerError, match=r"op mm0 \(MatMul\): Shard\(0\) x Shard\(0\) -> Shard\(0\) is not a split.*"
                                          r"rows: Shard\(0\) x Replicate\(\) -> Shard\(0\)"):
        op_splits(graph, wrong)
    with pytest.raises(PlacerError, match="does not plan 1 node"):
        op_splits(graph, Plan(["cuda:0"], {"mm0": OpPlan(("cuda:0",))}))
    with pytest.raises(PlacerError, match="on one device"):
        op_splits(graph, Plan(["cuda:0"], {"mm0": OpPlan(("cuda:0",), (Shard(0), REPLICATE), (Shard(0),)),
                                           "relu0": OpPlan(("cuda:0",))}))


PLACEMENT = Placement(["cpu:0", "cuda:0"], {"mm0": "cuda:0", "relu0": "cpu:0"}, graph_sha256="abc",
                      measurement={"step_time": 0.5}, extra={"placer": {"name": "metis"}})


def test_every_placement_is_a_plan_and_back_losslessly(tmp_path):
    plan = Plan.from_placement(PLACEMENT)
    assert plan.is_placement and plan.to_placement() == PLACEMENT
    plan.save(tmp_path / "plan.json")
    assert Plan.load(tmp_path / "plan.json").to_placement() == PLACEMENT
    PLACEMENT.save(tmp_path / "placement.json")   # a placement file reads as its plan
    assert Plan.load(tmp_path / "placement.json") == plan


def test_a_plan_file_round_trips_with_its_layouts(tmp_path):
    devices = ("cuda:0", "cuda:1")
    plan = Plan(list(devices), {"mm0": OpPlan(devices, (Shard(1), Shard(0)), (PARTIAL,)),
                                "relu0": OpPlan(("cuda:1",))}, graph_sha256="abc")
    plan.save(tmp_path / "plan.json")
    data = json.loads((tmp_path / "plan.json").read_text())
    assert data["format"] == "placer.plan/1"
    assert data["ops"] == {"mm0": {"devices": ["cuda:0", "cuda:1"], "inputs": ["Shard(1)", "Shard(0)"],
                                   "outputs": ["Partial()"]}, "relu0": {"devices": ["cuda:1"]}}
    assert Plan.load(tmp_path / "plan.json") == plan
    with pytest.raises(PlacerError, match="so it is no placement"):
        plan.to_placement()


def test_a_plan_file_of_a_later_version_is_refused_in_one_line(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({**Plan.from_placement(PLACEMENT).to_dict(), "format": "placer.plan/2"}))
    with pytest.raises(PlacerError) as error:
        Plan.load(path)
    assert "placer.plan/2" in str(error.value) and "placer.plan/1" in str(error.value)
    assert "\n" not in str(error.value)
    path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(PlacerError, match="not a plan file"):
        Plan.load(path)
