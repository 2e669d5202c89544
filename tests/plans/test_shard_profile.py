"""Batch shards timed at their own shapes (`placer.plans.shard_profile`): a plan's prediction on this
machine reads them instead of each shard's share of the whole op."""

from __future__ import annotations

import math

import onnx
import pytest

from placer.costmodel.simulator import AnalyticCostModel, SimulatedMeasurer
from placer.devices import parse_devices
from placer.graph.feeds import step_feeds
from placer.kernels.loading import load_graph
from placer.placement import Placement
from placer.plans.data_parallel import data_parallel
from placer.plans.lower import lower
from placer.plans.pricing import SourceCosts, plan_cost, predict_plan
from placer.plans.shard_profile import ShardProfiled, helper_key, profile_shards, profiled_plans, shard_key
from testgraphs import branches, tiny_conv_file

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
    assert shards and keys <= set(costs.times)   # each op's replicas' shards alike: one figure
    # a chain of MatMuls split by weights reduces its partial sums: those steps are timed too
    onnx.save(branches(1, 3, width=64, batch=8), tmp_path / "chain.onnx")
    chain = load_graph(tmp_path / "chain.onnx")
    timed = profile_shards(chain, devices, profiled_cost_model(chain, devices), step_feeds(chain, 0))
    split = lower(chain, profiled_plans(chain, TWO)[-1])
    assert split.helpers and {helper_key(split.graph.nodes[h]) for h in split.helpers} == set(timed.helper_times)
    read = SourceCosts(costs, graph, lowered)
    for name, source in shards.items():
        node = lowered.graph.nodes[name]
        for d in TWO:
            raw = costs.times[shard_key(node, source)][d]
            assert math.isfinite(raw) and raw >= 0
            assert read.op_time(node, d) == (raw if raw == 0 else base.calibrated(raw, d))


def test_a_collectives_steps_are_priced_as_profiled_here(tmp_path):
    """A chain of MatMuls split by weights reduces its partial sums: on this machine's devices each
    step of that costs what its kernel was profiled at (here 1 s each), not nothing."""
    onnx.save(branches(1, 3, width=64, batch=8), tmp_path / "chain.onnx")
    graph = load_graph(tmp_path / "chain.onnx")
    base = AnalyticCostModel(TWO)
    plan = profiled_plans(graph, TWO)[-1]   # every op split by weights where its maths allows
    lowered = lower(graph, plan)
    assert lowered.helpers
    timed = ShardProfiled(base, {}, {helper_key(lowered.graph.nodes[h]): {d: 1.0 for d in TWO}
                                     for h in lowered.helpers})
    cost = plan_cost(lowered, lambda g: SourceCosts(timed, graph, lowered))
    assert all(cost.op_time(lowered.graph.nodes[h], d) == 1.0 for h in lowered.helpers for d in TWO)
    assert predict_plan(graph, plan, timed).step_time >= 1.0 > predict_plan(graph, plan, base).step_time
