"""The data-parallel plan (DDP's forward step) and its row in a simulated comparison."""

from __future__ import annotations

from dataclasses import replace

import pytest

from placer.costmodel.roofline import cluster_measurer
from placer.devices import as_devices
from placer.errors import PlacerError
from placer.jobs.compare import simulated_comparison
from placer.hardware import load_cluster
from placer.measure.measurement import OOM
from placer.placement import Placement
from placer.plans.data_parallel import data_parallel
from placer.plans.layout import REPLICATE, Shard
from placer.plans.lower import lower
from placer.plans.pricing import simulate_plan
from plancases import conv_net, pairwise_cluster

FOUR = [f"cuda:{i}" for i in range(4)]


def test_data_parallel_splits_every_op_on_its_batch_keeps_the_weights_whole_and_never_talks():
    graph = conv_net(batch=8)
    plan = data_parallel(graph, FOUR)
    for name, node in graph.nodes.items():
        op = plan.ops[name]
        assert op.devices == tuple(FOUR) and op.outputs == (Shard(0),), name
        assert all(x == (REPLICATE if t in graph.initializers else Shard(0)) for t, x in zip(node.inputs, op.inputs))
    lowered = lower(graph, plan)
    assert not lowered.helpers   # no collective in the forward step
    assert {lowered.graph.nodes[f"fc@{d}"].output_shapes for d in FOUR} == {((2, 10),)}
    assert plan.extra["placer"] == {"name": "data_parallel", "replicated": []}


def test_each_device_holds_what_the_whole_net_on_a_quarter_of_the_batch_holds():
    """Every weight, and a quarter of the batch's inputs and activations."""
    cluster = pairwise_cluster(4)
    graph, quarter = conv_net(batch=8), conv_net(batch=2)
    peaks = simulate_plan(graph, data_parallel(graph, FOUR), cluster).peak_memory
    alone = cluster_measurer(cluster, quarter).measure(Placement.single_device(list(quarter.nodes), "cuda:0",
                                                                               devices=FOUR))
    assert peaks == {d: alone.peak_memory["cuda:0"] for d in FOUR}
    assert all(p > graph.total_param_bytes for p in peaks.values())


def test_a_graph_whose_batch_is_one_has_nothing_for_data_parallelism_to_split():
    with pytest.raises(PlacerError, match="no op .* has a batch axis longer than 1"):
        data_parallel(conv_net(batch=1), FOUR)


def compare_on(cluster, graph):
    return simulated_comparison(graph, as_devices(cluster.device_specs()), cluster, ["single"], None, None, 0,
                                plans=("data_parallel",))


def test_a_simulated_comparison_has_a_data_parallel_row_with_its_step_time_and_memory_per_device():
    """On 4 A100s (and a CPU, which DDP leaves out), a compute-bound net's batch split four ways."""
    cluster, graph = load_cluster("4xa100-nvlink"), conv_net(batch=64, size=64, channels=64)
    comparison = compare_on(cluster, graph)
    row = comparison.row("data_parallel")
    assert row.measurement.ok and row.step_time == simulate_plan(graph, data_parallel(graph, FOUR), cluster).step_time
    assert row.measurement.peak_memory["cpu:0"] == 0 and all(row.measurement.peak_memory[d] > 0 for d in FOUR)
    assert row.placement is None and row.predicted_step_time == row.step_time
    # each device does a quarter of the work, and pays every launch: between 2.5 and 4 times faster
    assert 2.5 < comparison.row("single:cuda:0").step_time / row.step_time <= 4
    # a batch of one: a note that says why, no row
    unsplit = compare_on(cluster, conv_net(batch=1))
    assert unsplit.row("data_parallel") is None
    assert any(n.startswith("data_parallel: not simulated") and "batch" in n for n in unsplit.notes)


def test_a_data_parallel_row_that_does_not_fit_fails_saying_which_device():
    cluster = pairwise_cluster(2)
    small = replace(cluster, devices=tuple(replace(d, model=replace(d.model, memory_bytes=2000))
                                           for d in cluster.devices))
    row = compare_on(small, conv_net(batch=8)).row("data_parallel")
    assert not row.measurement.ok and row.measurement.failure == OOM
    assert "cuda:0 needs" in row.measurement.reason and "over its cap of 2000" in row.measurement.reason


def test_a_plan_is_predicted_from_the_source_graphs_costs_each_shard_its_share(tmp_path):
    """What compare predicts for a plan row on this machine: each shard its op's profiled time times
    its share of the work; with costs that scale with the work, DDP on two devices is half of one."""
    from placer.costmodel.simulator import AnalyticCostModel, SimulatedMeasurer
    from placer.kernels.loading import load_graph
    from placer.plans.pricing import predict_plan
    from testgraphs import tiny_conv_file

    graph = load_graph(tiny_conv_file(tmp_path / "tiny.onnx", batch=8))
    costs = AnalyticCostModel(["cpu:0", "cpu:1"])
    alone = Placement.single_device(list(graph.nodes), "cpu:0", graph.sha256)
    one = SimulatedMeasurer(graph, ["cpu:0", "cpu:1"], costs).measure(alone).step_time
    assert predict_plan(graph, data_parallel(graph, ["cpu:0", "cpu:1"]), costs).step_time == pytest.approx(one / 2)
