"""A plan lowered to an ordinary graph and placement: each split op one op per shard with its own
sliced tensors, each layout change its collective, priced by the simulator placer already has."""

from __future__ import annotations

from dataclasses import replace

import pytest

from placer.costmodel.roofline import RooflineCostModel, cluster_measurer
from placer.graph.load import load_graph
from placer.hardware import load_cluster
from placer.measure.measurement import OOM
from placer.placement import Placement
from placer.plans.layout import REPLICATE, Shard
from placer.plans.lower import lower
from placer.plans.plan import OpPlan, Plan
from placer.plans.pricing import simulate_plan
from plancases import BANDWIDTH, LATENCY, LAUNCH, matmul_relu, pairwise_cluster
from testgraphs import branches

TWO = ("cuda:0", "cuda:1")


def test_a_placements_plan_lowers_to_that_placement_and_simulates_to_the_same_step():
    graph = load_graph(branches(3, 2))
    cluster = load_cluster("4xa100-nvlink")
    names = cluster.device_names
    placement = Placement(names, {n: names[i % len(names)] for i, n in enumerate(graph.nodes)})
    lowered = lower(graph, Plan.from_placement(placement))
    assert all(lowered.graph.nodes[n] is node for n, node in graph.nodes.items())
    assert lowered.placement.nodes == placement.nodes and not lowered.helpers
    as_plan = simulate_plan(graph, Plan.from_placement(placement), cluster)
    as_placement = cluster_measurer(cluster, graph).measure(placement)
    assert (as_plan.step_time, as_plan.peak_memory) == (as_placement.step_time, as_placement.peak_memory)


def test_a_shard_is_priced_by_its_own_sizes_not_the_whole_ops():
    """Each of mm's two row shards costs what a MatMul of half the rows costs on its own."""
    cluster = load_cluster("4xa100-nvlink")
    graph, half = matmul_relu(512, 1024, 1024), matmul_relu(256, 1024, 1024)
    rows = Plan(list(TWO), {"mm0": OpPlan(TWO, (Shard(0), REPLICATE), (Shard(0),)), "relu0": OpPlan(("cuda:0",))})
    lowered = lower(graph, rows)
    shard = lowered.graph.nodes["mm0@cuda:1"]
    assert shard.output_shapes == ((256, 1024),) and shard.flops == half.nodes["mm0"].flops
    priced = RooflineCostModel(cluster, lowered.graph).op_time(shard, "cuda:1")
    assert priced == RooflineCostModel(cluster, half).op_time(half.nodes["mm0"], "cuda:1")
    assert priced < RooflineCostModel(cluster, graph).op_time(graph.nodes["mm0"], "cuda:1")
    # a column shard holds half the weight; a row shard all of it
    columns = lower(graph, Plan(list(TWO), {"mm0": OpPlan(TWO, (REPLICATE, Shard(1)), (Shard(1),)),
                                            "relu0": OpPlan(("cuda:0",))}))
    assert columns.graph.nodes["mm0@cuda:1"].param_bytes == graph.nodes["mm0"].param_bytes // 2
    assert shard.param_bytes == graph.nodes["mm0"].param_bytes


def test_a_consumer_of_the_whole_tensor_pays_for_gathering_its_shards():
    """mm's three column shards, then relu whole on cuda:0: the two other shards are copied there
    (at once, over links of their own), then joined by one kernel."""
    three = ("cuda:0", "cuda:1", "cuda:2")
    graph = matmul_relu(8, 16, 30)
    plan = Plan(list(three), {"mm0": OpPlan(three, (REPLICATE, Shard(1)), (Shard(1),)), "relu0": OpPlan(("cuda:0",))})
    shard_bytes = 8 * 10 * 4
    step = simulate_plan(graph, plan, pairwise_cluster(3)).step_time
    assert step == pytest.approx(LAUNCH + LATENCY + shard_bytes / BANDWIDTH + 2 * LAUNCH, rel=1e-9)


def test_each_device_holds_its_slices_and_the_weights_it_reads_whole():
    """Peak memory per device through the simulator's own accounting: the replicated weight, the
    input's slice, and mm's and relu's output slices (both live while relu runs)."""
    m, k, n = 8, 16, 32
    graph = matmul_relu(m, k, n)
    rows = Plan(list(TWO), {"mm0": OpPlan(TWO, (Shard(0), REPLICATE), (Shard(0),)),
                            "relu0": OpPlan(TWO, (Shard(0),), (Shard(0),))})
    peaks = simulate_plan(graph, rows, pairwise_cluster(2)).peak_memory
    weight, x, out = k * n * 4, m // 2 * k * 4, m // 2 * n * 4
    assert peaks == {d: weight + x + 2 * out for d in TWO}
    whole = simulate_plan(graph, Plan(list(TWO), {"mm0": OpPlan(("cuda:0",)), "relu0": OpPlan(("cuda:0",))}),
                          pairwise_cluster(2)).peak_memory
    assert whole == {"cuda:0": weight + 2 * x + 4 * out, "cuda:1": 0}


def test_a_plan_over_a_devices_memory_fails_saying_which_device():
    cluster = pairwise_cluster(2)
    small = replace(cluster, devices=tuple(replace(d, model=replace(d.model, memory_bytes=1000))
                                           for d in cluster.devices))
    graph = matmul_relu(8, 16, 32)
    result = simulate_plan(graph, Plan(list(TWO), {"mm0": OpPlan(TWO, (Shard(0), REPLICATE), (Shard(0),)),
                                                   "relu0": OpPlan(TWO, (Shard(0),), (Shard(0),))}), small)
    assert not result.ok and result.failure == OOM and "cuda:0 needs" in result.reason


def test_a_sharded_tensor_handed_on_to_another_stage_goes_piece_by_piece():
    """Pipeline stages, each data parallel: mm's row shards on cuda:0 and cuda:1, relu's on cuda:2 and
    cuda:3; shard k goes straight to the next stage's device k, at once over links of their own."""
    graph = matmul_relu(8, 16, 30)
    plan = Plan([f"cuda:{i}" for i in range(4)],
                {"mm0": OpPlan(TWO, (Shard(0), REPLICATE), (Shard(0),)),
                 "relu0": OpPlan(("cuda:2", "cuda:3"), (Shard(0),), (Shard(0),))})
    lowered = lower(graph, plan)
    assert lowered.graph.nodes["relu0@cuda:3"].inputs == ("m0@cuda:1",) and not lowered.helpers
    step = simulate_plan(graph, plan, pairwise_cluster(4)).step_time
    assert step == pytest.approx(LAUNCH + LATENCY + 4 * 30 * 4 / BANDWIDTH + LAUNCH, rel=1e-9)


def test_every_devices_time_of_a_lowered_node_at_once_equals_each_ones():
    """`PlanCostModel.op_times` (what the simulator reads) prices a collective's launch once per
    device model, and gives each device what `op_time` gives it: launches, free steps and shards,
    on a cluster of two GPU models and a CPU."""
    from placer.costmodel.protocol import op_times
    from placer.plans.lowered import HelperCost
    from placer.plans.pricing import plan_cost

    cluster = load_cluster("v100-k40-mix")
    names = cluster.device_names
    graph = matmul_relu(64, 128, 256)
    plan = Plan(list(names), {"mm0": OpPlan(tuple(names), (REPLICATE, Shard(1)), (Shard(1),)),
                              "relu0": OpPlan(tuple(names), (Shard(0),), (Shard(0),))})   # an all-to-all
    lowered = lower(graph, plan)
    cost = plan_cost(lowered, lambda g: RooflineCostModel(cluster, g))
    assert {HelperCost.LAUNCH, HelperCost.FREE} <= set(lowered.helpers.values())
    for node in lowered.graph.nodes.values():
        assert op_times(cost, node, names) == [cost.op_time(node, d) for d in names], node.name
    launch = next(lowered.graph.nodes[n] for n, c in lowered.helpers.items() if c is HelperCost.LAUNCH)
    assert len(set(op_times(cost, launch, names))) > 1   # the V100s' launch is not the K40s'


@pytest.mark.parametrize("which", ["data_parallel", "tensor_parallel", "all_to_all"])
def test_a_plan_lowered_for_pricing_alone_simulates_as_the_runnable_one(which, tmp_path):
    """Lowered without protos or a DiGraph (a search's plans), a plan's simulated step and peaks are
    the runnable lowering's, and what it left out cannot be read by mistake."""
    import graphs
    from placer.plans.data_parallel import data_parallel
    from placer.plans.pricing import plan_cost
    from placer.plans.tensor_parallel import tensor_parallel

    cluster = load_cluster("v100-k40-mix")
    names = cluster.device_names
    gpus = [d for d in names if d.startswith("cuda")]
    if which == "all_to_all":
        graph = matmul_relu(64, 128, 256)
        plan = Plan(list(names), {"mm0": OpPlan(tuple(names), (REPLICATE, Shard(1)), (Shard(1),)),
                                  "relu0": OpPlan(tuple(names), (Shard(0),), (Shard(0),))})
    else:
        graph = load_graph(graphs.export("transformer", tmp_path / "t.onnx", batch=4, seq_len=8, layers=2, vocab=64))
        plan = data_parallel(graph, gpus) if which == "data_parallel" else tensor_parallel(graph, gpus)
    runnable, priced = lower(graph, plan), lower(graph, plan, runnable=False)
    assert priced.helpers == runnable.helpers and priced.placement.nodes == runnable.placement.nodes
    assert priced.graph.dag is None and all(node.proto is None for node in priced.graph.nodes.values()
                                            if node.name not in graph.nodes)

    def simulated(lowered):
        cost = plan_cost(lowered, lambda g: RooflineCostModel(cluster, g))
        return cluster_measurer(cluster, lowered.graph, cost).measure(lowered.placement)

    a, b = simulated(runnable), simulated(priced)
    assert (a.ok, a.step_time, a.peak_memory) == (b.ok, b.step_time, b.peak_memory)
    assert simulate_plan(graph, plan, cluster).step_time == a.step_time
