"""Per-device summary: nodes, FLOPs, weights, bytes crossing devices."""

from __future__ import annotations

from .conftest import placement_json
from placer.annotate.summary import cross_device_bytes, crossings, summarize
from placer.placement import Placement


def test_summary_counts_nodes_flops_and_weights_per_device(diamond_graph, two_cpu_placement):
    rows = {r.device: r for r in summarize(diamond_graph, two_cpu_placement)}
    assert rows["cpu:0"].nodes == 7 and rows["cpu:1"].nodes == 2
    flops = {n: op.flops for n, op in diamond_graph.nodes.items()}
    assert rows["cpu:1"].flops == flops["conv_a"] + flops["mul"]
    assert rows["cpu:0"].flops + rows["cpu:1"].flops == diamond_graph.total_flops
    # w1 (4x3x3x3), b1 (4), wfc (5x4), bfc (5) on cpu:0; w2 (4x4x1x1) on cpu:1; float32
    assert rows["cpu:0"].param_bytes == 4 * (108 + 4 + 20 + 5)
    assert rows["cpu:1"].param_bytes == 4 * 16


def test_bytes_crossing_count_each_tensor_once_per_reading_device(diamond_graph, two_cpu_placement):
    activation = 4 * 1 * 4 * 8 * 8   # r1, b and m are all 1x4x8x8 float32
    assert sorted(crossings(diamond_graph, two_cpu_placement)) == [
        ("b", "cpu:0", ["cpu:1"]), ("m", "cpu:1", ["cpu:0"]), ("r1", "cpu:0", ["cpu:1"])]
    rows = {r.device: r for r in summarize(diamond_graph, two_cpu_placement)}
    assert rows["cpu:0"].bytes_sent == 2 * activation and rows["cpu:0"].bytes_received == activation
    assert rows["cpu:1"].bytes_sent == activation and rows["cpu:1"].bytes_received == 2 * activation
    assert cross_device_bytes(diamond_graph, two_cpu_placement) == 3 * activation


def test_one_device_moves_nothing(diamond_graph):
    p = Placement.from_dict(placement_json(diamond_graph, {}, "cpu:0", ["cpu:0", "cpu:1"]))
    rows = summarize(diamond_graph, p)
    assert [r.nodes for r in rows] == [9, 0] and cross_device_bytes(diamond_graph, p) == 0
