"""Data parallelism with the batch cut in proportion to each device's speed (uneven shards)."""

from __future__ import annotations

import pytest

from placer.costmodel.roofline import RooflineCostModel
from placer.errors import PlacerError
from placer.plans.data_parallel import data_parallel
from placer.plans.data_parallel_by_speed import batch_shares, data_parallel_by_speed
from placer.plans.layout import REPLICATE, Shard, parse_layout, piece_shape, shard_sizes
from placer.plans.lower import lower
from placer.plans.plan import OpPlan, Plan
from placer.plans.pricing import simulate_plan
from plancases import conv_net, fast_and_slow

TWO = ["cuda:0", "cuda:1"]


def test_uneven_shards_cut_an_axis_in_proportion_and_read_back_from_their_text():
    assert shard_sizes(8, 2, (3, 1)) == [6, 2] and shard_sizes(10, 3, (1, 1, 1)) == shard_sizes(10, 3) == [4, 3, 3]
    assert piece_shape((8, 5), Shard(0, (6, 2)), 1, 2) == (2, 5)
    assert parse_layout(str(Shard(0, (6, 2)))) == Shard(0, (6, 2)) and str(Shard(0)) == "Shard(0)"
    with pytest.raises(PlacerError, match="no part"):
        parse_layout("Shard(0, parts=3:0)")


def test_the_fast_device_gets_three_quarters_of_the_batch_and_of_the_work():
    graph, cluster = conv_net(batch=8), fast_and_slow()
    assert batch_shares(graph, TWO, RooflineCostModel(cluster, graph)) == {"cuda:0": 6, "cuda:1": 2}
    plan = data_parallel_by_speed(graph, TWO, RooflineCostModel(cluster, graph))
    assert plan.ops["conv"].outputs == (Shard(0, (6, 2)),)
    assert Plan.from_dict(plan.to_dict()).ops == plan.ops   # the plan file keeps the parts
    lowered = lower(graph, plan)
    conv = graph.nodes["conv"]
    fast, slow = lowered.graph.nodes["conv@cuda:0"], lowered.graph.nodes["conv@cuda:1"]
    assert (fast.output_shapes, slow.output_shapes) == (((6, 8, 8, 8),), ((2, 8, 8, 8),))
    assert (fast.flops, slow.flops) == (conv.flops * 6 / 8, conv.flops * 2 / 8)   # each priced by its own slice



def test_cut_by_speed_both_finish_together_where_the_even_cut_waits_for_the_slow_half():
    """Ideally 1.5x (the slow device's half of the batch against its quarter); an op's time is not
    quite proportional to its work (small kernels reach less of the peak), so a little less."""
    graph, cluster = conv_net(batch=8, size=128, channels=128), fast_and_slow()
    uneven = simulate_plan(graph, data_parallel_by_speed(graph, TWO, RooflineCostModel(cluster, graph)), cluster)
    even = simulate_plan(graph, data_parallel(graph, TWO), cluster)
    assert 1.3 < even.step_time / uneven.step_time <= 1.5
    assert uneven.peak_memory["cuda:0"] > 2 * uneven.peak_memory["cuda:1"]   # three times the activations


def test_an_uneven_tensor_is_gathered_from_its_own_slices():
    """A replicated op reading an unevenly sharded tensor: the all-gather moves 6 rows and 2 rows."""
    graph = conv_net(batch=8)
    parts = Shard(0, (6, 2))
    ops = {n: OpPlan(tuple(TWO), tuple(parts if t == "x" or n != "conv" and t in ("c", "r", "p") else REPLICATE
                                       for t in node.inputs), (parts,)) for n, node in graph.nodes.items()}
    ops["fc"] = OpPlan(tuple(TWO))
    lowered = lower(graph, Plan(TWO, ops, graph.sha256))
    gathered = [shape for n, node in lowered.graph.nodes.items() if node.op_type == "AllGather"
                and n.startswith("f/") for shape in node.output_shapes]   # the ring's copies, as priced
    assert sorted(gathered) == [(2, 8), (6, 8)]


def test_an_op_cut_unevenly_but_not_alike_is_refused():
    graph = conv_net(batch=8)
    plan = data_parallel(graph, TWO)
    ops = dict(plan.ops)
    ops["relu"] = OpPlan(tuple(TWO), (Shard(0, (6, 2)),), (Shard(0, (5, 3)),))
    with pytest.raises(PlacerError, match="unevenly but not alike"):
        lower(graph, Plan(TWO, ops, graph.sha256))


def test_devices_equally_fast_have_nothing_to_gain_and_the_builder_says_so():
    graph, cluster = conv_net(batch=8), fast_and_slow(ratio=1.0)
    with pytest.raises(PlacerError, match="splits evenly"):
        data_parallel_by_speed(graph, TWO, RooflineCostModel(cluster, graph))
