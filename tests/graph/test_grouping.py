"""Grouping: co-location heuristics, partitioning to a target count, determinism, expansion."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.errors import PlacerError
from placer.graph.grouping import METHODS, colocate, default_group_count, group_graph
from placer.graph.load import load_graph
import testgraphs

W = 32


def _model(nodes, inits, out_shape) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def branches(n: int, depth: int) -> onnx.ModelProto:
    return testgraphs.branches(n, depth, width=W, batch=8)


def separate_chains(n: int) -> onnx.ModelProto:
    """n chains x -> Relu -> Tanh -> y<i>, each its own graph output: n co-location groups."""
    nodes = [node for i in range(n) for node in (helper.make_node("Relu", ["x"], [f"r{i}"], name=f"relu{i}"),
                                                 helper.make_node("Tanh", [f"r{i}"], [f"y{i}"], name=f"tanh{i}"))]
    outputs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [8, W]) for i in range(n)]
    graph = helper.make_graph(nodes, "chains", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, W])],
                              outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def shape_subgraph() -> onnx.ModelProto:
    """x -> relu -> reshape(to the shape computed from x by Shape -> Concat with a constant)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Constant", [], ["one"], name="const",
                              value=numpy_helper.from_array(np.array([1], dtype=np.int64))),
             helper.make_node("Concat", ["s", "one"], ["s3"], name="cat_shape", axis=0),
             helper.make_node("Reshape", ["r", "s3"], ["y"], name="reshape")]
    return _model(nodes, [], [8, W, 1])


@pytest.fixture(scope="module")
def eight_branches():
    return load_graph(branches(8, 3))


def test_every_node_is_in_exactly_one_group_and_groups_follow_topological_order(eight_branches):
    g = eight_branches
    for method in METHODS:
        grouping = group_graph(g, 8, 2, method)
        flat = [n for members in grouping.groups for n in members]
        assert sorted(flat) == sorted(g.nodes), method
        assert all(grouping.node_group[n] == i for i, members in enumerate(grouping.groups) for n in members)
        order = list(g.nodes)
        firsts = [order.index(members[0]) for members in grouping.groups]
        assert firsts == sorted(firsts), method


@pytest.mark.parametrize("method", ["partition", "metis", "topo"])
def test_partitioning_reaches_the_target_number_of_groups(eight_branches, method):
    assert len(group_graph(eight_branches, 8, 2, method)) == 8
    assert len(group_graph(eight_branches, 3, 2, method)) <= 3


def test_the_default_count_follows_the_colocation_groups_between_20_per_device_and_256(eight_branches):
    assert default_group_count(10_000, 2) == 40
    assert default_group_count(10_000, 2, n_colocated=120) == 120
    assert default_group_count(10_000, 2, n_colocated=320) == 256
    assert default_group_count(10_000, 16) == 256
    assert default_group_count(30, 4) == 30
    assert len(group_graph(eight_branches, None, 2)) == min(40, len(eight_branches.nodes))
    sixty = load_graph(separate_chains(60))  # 60 co-location groups, more than 20 x 2
    assert len(colocate(sixty)) == 60
    assert len(group_graph(sixty, None, 2)) == 60


def test_partitioning_keeps_independent_branches_together(eight_branches):
    """Cutting few bytes: with one group per branch, no branch is split across groups."""
    grouping = group_graph(eight_branches, 8, 2, "partition")
    for b in range(8):
        assert len({grouping.node_group[f"{op}{b}_{k}"] for op in ("mm", "relu") for k in range(3)}) == 1


def test_grouping_is_deterministic(eight_branches):
    for method in METHODS:
        a, b = group_graph(eight_branches, 5, 2, method), group_graph(load_graph(branches(8, 3)), 5, 2, method)
        assert a.groups == b.groups and a.signature() == b.signature()


def test_a_shape_subgraph_joins_the_op_that_consumes_it():
    g = load_graph(shape_subgraph())
    groups = colocate(g, cap=1.0)   # a cap that refuses every merge except the forced ones
    by_node = {n: i for i, members in enumerate(groups) for n in members}
    static = [n for n in g.nodes if g.nodes[n].op_type in ("Shape", "Constant", "Concat")]
    assert static, "the shape subgraph should survive loading"
    assert {by_node[n] for n in static} == {by_node["reshape"]}
    assert by_node["relu"] != by_node["reshape"]


def test_a_node_whose_output_only_one_node_reads_joins_it():
    g = load_graph(branches(1, 3))
    groups = colocate(g)   # no cap: the whole chain collapses
    assert len(groups) == 1


def test_the_cost_cap_stops_a_chain_from_collapsing_into_one_group():
    g = load_graph(branches(1, 6))
    assert len(group_graph(g, 4, 2, "colocate")) >= 4


def test_expand_puts_every_node_of_a_group_on_the_group_device(eight_branches):
    g = eight_branches
    grouping = group_graph(g, 8, 2)
    choice = [i % 2 for i in range(len(grouping))]
    p = grouping.expand(choice, ["cpu:0", "cpu:1"], g.sha256)
    assert p.graph_sha256 == g.sha256 and set(p.nodes) == set(g.nodes)
    for i, members in enumerate(grouping.groups):
        assert {p.nodes[n] for n in members} == {["cpu:0", "cpu:1"][choice[i]]}
    assert grouping.node_assignment(choice, list(g.nodes)) == [["cpu:0", "cpu:1"].index(p.nodes[n]) for n in g.nodes]
    with pytest.raises(ValueError):
        grouping.expand(choice[:-1], ["cpu:0", "cpu:1"])


def test_bad_options_are_placer_errors(eight_branches):
    with pytest.raises(PlacerError, match="grouping method"):
        group_graph(eight_branches, 4, 2, "kmeans")
    with pytest.raises(PlacerError, match="at least 1"):
        group_graph(eight_branches, 0, 2)


def test_aligning_to_a_placement_keeps_each_group_on_one_device_within_the_limit(eight_branches):
    """A placement that alternates devices node by node splits nearly every group; with a limit the
    parts are merged back on their own device, never across two."""
    from placer.graph.grouping import align

    grouping = group_graph(eight_branches, 6)
    devices = {n: f"d{i % 3}" for i, n in enumerate(eight_branches.nodes)}
    unlimited = align(eight_branches, grouping, devices)
    limited = align(eight_branches, grouping, devices, limit=8)
    assert len(unlimited) > 8 and 3 <= len(limited) <= 8
    for group in limited.groups:
        assert len({devices[n] for n in group}) == 1, group
    assert sorted(n for g in limited.groups for n in g) == sorted(eight_branches.nodes)
