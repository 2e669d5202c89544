"""Pipeline stages, each replicated for data parallelism."""

from __future__ import annotations

from functools import partial

import pytest

from placer.costmodel.roofline import RooflineCostModel
from placer.devices import as_devices
from placer.errors import PlacerError
from placer.hardware import load_cluster
from placer.jobs.compare import simulated_comparison
from placer.placement import Placement
from placer.placers.partitioners import pipeline_dp
from placer.plans.layout import Shard
from placer.plans.lower import lower
from placer.plans.pipeline_data import pipeline_data
from placer.plans.pricing import simulate_plan
from plancases import conv_net, pairwise_cluster

FOUR = [f"cuda:{i}" for i in range(4)]


def first_two_then_rest(graph, heads):
    """Stage 0: the conv and relu; stage 1: the rest."""
    return Placement(heads, {n: heads[0] if i < 2 else heads[1] for i, n in enumerate(graph.nodes)})


def test_each_stage_runs_on_its_own_replicas_split_on_the_batch_and_hands_on_piece_by_piece():
    graph = conv_net(batch=8)
    plan = pipeline_data(graph, FOUR, first_two_then_rest)
    assert plan.extra["placer"]["stages"] == [["cuda:0", "cuda:1"], ["cuda:2", "cuda:3"]]
    assert {n: op.devices for n, op in plan.ops.items()} == {
        "conv": ("cuda:0", "cuda:1"), "relu": ("cuda:0", "cuda:1"), "pool": ("cuda:2", "cuda:3"),
        "flatten": ("cuda:2", "cuda:3"), "fc": ("cuda:2", "cuda:3")}
    assert all(op.outputs == (Shard(0),) for op in plan.ops.values())
    lowered = lower(graph, plan)
    assert not lowered.helpers   # replica k of stage 0 sends its slice to replica k of stage 1: no collective
    assert lowered.graph.nodes["conv@cuda:1"].output_shapes == ((4, 8, 8, 8),)
    pool = lowered.graph.nodes["pool@cuda:3"]
    assert lowered.placement.nodes[lowered.graph.producer[pool.inputs[0]]] == "cuda:1"


def test_a_stage_holds_only_its_weights_and_the_step_pays_the_hand_on():
    cluster, graph = pairwise_cluster(4), conv_net(batch=8)
    measured = simulate_plan(graph, pipeline_data(graph, FOUR, first_two_then_rest), cluster)
    peaks = measured.peak_memory
    conv_weights = (8 * 3 * 3 * 3 + 8) * 4
    assert peaks["cuda:0"] == peaks["cuda:1"] and peaks["cuda:2"] == peaks["cuda:3"]
    assert peaks["cuda:0"] >= conv_weights and peaks["cuda:2"] < conv_weights + 4 * 8 * 8 * 8 * 4


def test_fewer_than_two_replicas_per_stage_is_an_error():
    with pytest.raises(PlacerError, match="2 stages of two replicas or more"):
        pipeline_data(conv_net(batch=8), FOUR[:3], first_two_then_rest)


def test_a_simulated_comparison_has_a_pipeline_data_row_cut_by_pipeline_dp():
    cluster, graph = load_cluster("4xa100-nvlink"), conv_net(batch=64, size=32, channels=32)
    comparison = simulated_comparison(graph, as_devices(cluster.device_specs()), cluster, ["single"], None, None, 0,
                                      plans=("pipeline_data",))
    row = comparison.row("pipeline_data")
    expected = pipeline_data(graph, FOUR, partial(pipeline_dp, cost=RooflineCostModel(cluster, graph)))
    assert row.measurement.ok and row.step_time == simulate_plan(graph, expected, cluster).step_time
    assert "pipeline stage" in row.note and all(row.measurement.peak_memory[d] > 0 for d in FOUR)
