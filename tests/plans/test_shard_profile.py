"""Batch shards timed at their own shapes (`placer.plans.shard_profile`): a plan's prediction on this
machine reads them instead of each shard's share of the whole op."""

from __future__ import annotations

import math

import pytest

from placer.costmodel.simulator import AnalyticCostModel, SimulatedMeasurer
from placer.devices import parse_devices
from placer.graph.feeds import step_feeds
from placer.kernels.loading import load_graph
from placer.placement import Placement
from placer.plans.data_parallel import data_parallel
from placer.plans.lower import lower
from placer.plans.pricing import SourceCosts, predict_plan
from placer.plans.shard_profile import ShardProfiled, profile_shards, shard_key
from testgraphs import tiny_conv_file

TWO = ["cpu:0", "cpu:1"]


def _shard_times(graph, base, factor: float) -> dict:
    """Every DDP shard timed at `factor` times its share of its op (the analytic costs scale with
    the work, so its share is half the op)."""
    lowered = lower(graph, data_parallel(graph, TWO))
    return {shard_key(lowered.graph.nodes[name], source): {d: factor * base.op_time(graph.nodes[source], d) / 2
                                                           for d in TWO}
            for name, source in lowered.shard_of.items() if name != source}


def test_a_plan_is_predicted_with_its_shards_profiled_times_not_their_share(tmp_path):
    graph = load_graph(tiny_conv_file(tmp_path / "tiny.onnx", batch=8))
    base = AnalyticCostModel(TWO)
    alone = Placement.single_device(list(graph.nodes), "cpu:0", graph.sha256)
    one = SimulatedMeasurer(graph, TWO, base).measure(alone).step_time
    plan = data_parallel(graph, TWO)
    # shards three times slower than their share: DDP on two devices takes 1.5x one device's step
    slow = ShardProfiled(base, _shard_times(graph, base, 3.0))
    assert predict_plan(graph, plan, slow).step_time == pytest.approx(1.5 * one)
    # no shard of these shapes timed (or none at all): each is its share again
    assert predict_plan(graph, plan, ShardProfiled(base, {})).step_time == pytest.approx(one / 2)


def test_the_shards_of_a_real_model_are_profiled_here_and_calibrated_as_its_ops(tmp_path, monkeypatch):
    from placer.costmodel.profile_cache import profiled_cost_model

    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    graph = load_graph(tiny_conv_file(tmp_path / "tiny.onnx", batch=4))
    devices = parse_devices("cpu:0[threads=1],cpu:1[threads=1]")
    base = profiled_cost_model(graph, devices)
    costs = profile_shards(graph, devices, base, step_feeds(graph, 0))
    lowered = lower(graph, data_parallel(graph, TWO))
    shards = {name: source for name, source in lowered.shard_of.items() if name != source}
    keys = {shard_key(lowered.graph.nodes[name], source) for name, source in shards.items()}
    assert shards and set(costs.times) == keys   # each op's replicas' shards alike: one figure
    read = SourceCosts(costs, graph, lowered)
    for name, source in shards.items():
        node = lowered.graph.nodes[name]
        for d in TWO:
            raw = costs.times[shard_key(node, source)][d]
            assert math.isfinite(raw) and raw >= 0
            assert read.op_time(node, d) == (raw if raw == 0 else base.calibrated(raw, d))
