"""Data parallelism with the batch cut in proportion to each device's speed (uneven shards)."""

from __future__ import annotations

from functools import partial

import pytest

from placer.costmodel.roofline import RooflineCostModel
from placer.costmodel.sim_program import training_program
from placer.errors import PlacerError
from placer.hardware.cluster import Cluster, ClusterDevice, Link
from placer.plans.busy import device_busy
from placer.plans.data_parallel import data_parallel
from placer.plans.data_parallel_by_speed import batch_shares, data_parallel_by_speed, describe
from placer.plans.layout import REPLICATE, Shard, parse_layout, piece_shape, shard_sizes
from placer.plans.lower import lower
from placer.plans.plan import OpPlan, Plan
from placer.placement import Placement
from placer.plans.pricing import simulate_plan
from placer.program.training import TrainingSpec
from plancases import BANDWIDTH, LATENCY, conv_net, fast_and_slow

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


def test_balanced_on_its_own_slice_the_slow_device_takes_fewer_samples_and_the_step_ends_sooner():
    """Cut by the whole batch's speeds (12:4) the slow GPU is 1.36x as busy as the fast one: its
    small slice reaches less of its peak. Cut again by each device's speed on its own slice, 13:3."""
    graph, cluster = conv_net(batch=16, size=128, channels=128), fast_and_slow()
    cost = RooflineCostModel(cluster, graph)
    busy = partial(device_busy, graph, cluster=cluster)
    proportional, balanced = data_parallel_by_speed(graph, TWO, cost), data_parallel_by_speed(graph, TWO, cost, busy)
    assert proportional.extra["placer"]["shares"] == {"cuda:0": 12, "cuda:1": 4}
    assert balanced.extra["placer"]["shares"] == {"cuda:0": 13, "cuda:1": 3}
    before, after = busy(proportional), busy(balanced)
    assert before["cuda:1"] > 1.3 * before["cuda:0"] and after["cuda:1"] < 1.1 * after["cuda:0"]
    assert simulate_plan(graph, balanced, cluster).step_time < 0.9 * simulate_plan(graph, proportional, cluster).step_time
    assert "own slice" in describe(balanced) and "own slice" not in describe(proportional)


def test_a_devices_busy_seconds_are_its_steps_times_forward_or_training():
    graph, cluster = conv_net(batch=8), fast_and_slow()
    cost = RooflineCostModel(cluster, graph)
    whole = Plan.from_placement(Placement(TWO, dict.fromkeys(graph.nodes, "cuda:1"), graph.sha256))
    assert device_busy(graph, whole, cluster) == pytest.approx(
        {"cuda:1": sum(cost.op_time(node, "cuda:1") for node in graph.nodes.values())}, rel=1e-12)
    spec = TrainingSpec()
    program = training_program(graph, TWO, cost, spec)
    assert device_busy(graph, whole, cluster, spec) == pytest.approx({"cuda:1": sum(t[1] for t in program.times)}, rel=1e-12)


def test_a_device_too_slow_for_a_sample_is_left_out_and_the_row_says_so():
    """Two fast GPUs and one 40 times slower share 4 samples: the slow one gets none. The plan is
    DDP over the fast two, a plan of its own (not DDP over all three), and its line names the one left out."""
    graph, pair = conv_net(batch=4, size=128, channels=128), fast_and_slow(ratio=40.0)
    fast, slow = (d.model for d in pair.devices)
    cluster = Cluster("two-fast-one-slow", "test", (ClusterDevice("cuda:0", fast), ClusterDevice("cuda:1", fast),
                                                    ClusterDevice("cuda:2", slow)),
                      (Link("bus", ("cuda:0", "cuda:1", "cuda:2"), BANDWIDTH, LATENCY, "test"),))
    plan = data_parallel_by_speed(graph, ["cuda:0", "cuda:1", "cuda:2"], RooflineCostModel(cluster, graph),
                                  partial(device_busy, graph, cluster=cluster))
    assert plan.devices == ["cuda:0", "cuda:1"] and plan.extra["placer"]["shares"] == {"cuda:0": 2, "cuda:1": 2}
    assert describe(plan).endswith("cuda:2 left out (too slow for one sample to pay its way)")
