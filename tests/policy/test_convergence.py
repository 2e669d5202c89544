"""The learner learns, shown on a problem of realistic size where random search is the yardstick.

Inception-v3 (the zoo's export, 215 ops) on two devices with the deterministic analytic simulator:
the policy's own greedy placement must beat the best of as many uniformly random placements as
it sampled, and the policy must settle (low entropy per group). A policy that samples uniformly,
or does not update, fails both: its greedy placement is one arbitrary placement and its entropy
stays at ln 2 per group.
"""

from __future__ import annotations

import pytest

from placer.graph.grouping import group_graph
from placer.graph.load import load_graph
from placer.costmodel.simulator import AnalyticCostModel, SimulatedMeasurer, Simulator
from placer.placers.random_search import random_search_curve
from placer.policy.hparams import Hyperparameters
from placer.policy.run_state import CONVERGED_ENTROPY
from placer.policy.trainer import train
from placer.policy.warm_start import plan_warm_start

graphs = pytest.importorskip("graphs")
DEVICES = ["cpu:0", "cpu:1"]


@pytest.fixture(scope="module")
def inception(tmp_path_factory):
    graph = load_graph(graphs.export("inception_v3", tmp_path_factory.mktemp("zoo") / "inception_v3.onnx"))
    return graph, AnalyticCostModel(DEVICES)


def _random_search(graph, cost, grouping, samples: int) -> float:
    return random_search_curve(graph, DEVICES, cost, seed=0, counts=(samples,), grouping=grouping)[samples]


def test_from_scratch_the_greedy_placement_beats_random_search_at_the_same_samples(inception, tmp_path):
    """No warm start: what the policy ends with comes from reinforcement learning alone."""
    graph, cost = inception
    grouping = group_graph(graph, None, len(DEVICES))
    assert len(grouping) >= 40
    hp = Hyperparameters(warm_start="none", lr=0.01)
    s = train(graph, SimulatedMeasurer(graph, DEVICES, cost), grouping, tmp_path, hp, samples=3000, seed=0).summary
    searched = _random_search(graph, cost, grouping, s["samples"])
    assert s["greedy"]["step_time"] < 0.97 * searched
    assert s["entropy_per_group"] <= CONVERGED_ENTROPY and s["converged"]


def test_warm_started_it_improves_on_the_best_baseline_it_imitated(inception, tmp_path):
    """The default: imitate the fastest baseline placer, then learn; the greedy placement must end
    strictly faster than that baseline (imitation alone only equals it) and than random search."""
    graph, cost = inception
    warm = plan_warm_start(graph, DEVICES, cost, {}, group_graph(graph, None, len(DEVICES)))
    baselines = [t for t in warm.candidates.values() if t is not None]
    assert warm.simulated_step_time == min(baselines)
    start = Simulator(graph, DEVICES, cost).simulate(
        warm.grouping.node_assignment([int(d) for d in warm.group_devices], list(graph.nodes))).step_time
    assert start == pytest.approx(warm.simulated_step_time)      # aligned groups hold the baseline exactly
    s = train(graph, SimulatedMeasurer(graph, DEVICES, cost), warm.grouping, tmp_path, Hyperparameters(),
              samples=2000, seed=0, warm_start=warm).summary
    assert s["warm_start"]["source"] == warm.source
    assert s["greedy"]["step_time"] < warm.simulated_step_time
    assert s["greedy"]["step_time"] < 0.95 * _random_search(graph, cost, warm.grouping, 2000)
    assert s["entropy_per_group"] <= CONVERGED_ENTROPY
