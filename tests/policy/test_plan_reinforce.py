"""REINFORCE over plans learns: from a one-GPU start, with the budget of 150 simulated plans, its
plans of eight independent matmul branches on four GPUs end faster than DDP; the same sampler
with the policy never updated (only the imitation of the start, and of the best plan at each
restart) ends behind it on every seed."""

from __future__ import annotations

import pytest

from placer.placement import Placement
from placer.policy import plan_reinforce as reinforce
from placer.plans.data_parallel import data_parallel
from placer.plans.plan import Plan
from placer.plans.pricing import simulate_plan
from plancases import matmul_relu, memory_bound

GPUS = [f"cuda:{i}" for i in range(4)]


@pytest.fixture(scope="module")
def problem():
    graph, cluster = matmul_relu(64, 512, 512, branches=8), memory_bound((2**40,) * 4)
    start = Plan.from_placement(Placement.single_device(list(graph.nodes), "cuda:0", devices=GPUS))
    return graph, cluster, {"cuda:0": start}


def ratios(problem, seeds=(0, 1, 2)) -> list[float]:
    graph, cluster, starts = problem
    found = [reinforce.plan_reinforce(graph, cluster, starts, samples=150, seed=s) for s in seeds]
    for f in found:   # what it reports is what its plan simulates to, within the budget
        assert f.step_time == simulate_plan(graph, f.plan, cluster).step_time and f.samples <= 151
    return [f.step_time / f.start_time for f in found]


@pytest.fixture(scope="module")
def learned(problem):
    return ratios(problem)


def test_the_learner_beats_ddp_from_a_one_gpu_start(problem, learned):
    graph, cluster, starts = problem
    ddp = simulate_plan(graph, data_parallel(graph, GPUS), cluster).step_time / \
        simulate_plan(graph, starts["cuda:0"], cluster).step_time
    assert ddp == pytest.approx(0.75, abs=0.01)
    assert max(learned) < 0.6 < ddp   # seeds 0-2: 0.453, 0.447, 0.436


def test_without_its_updates_the_same_sampler_ends_behind_on_every_seed(problem, learned, monkeypatch):
    """The check above can fail: a policy that only imitates (the start, then the best plan at each
    restart) ends at 0.646, 0.491 and 0.519 (0.83-0.84 without restarts)."""
    class Unchanged:
        new_baseline = 0.0

    monkeypatch.setattr(reinforce, "reinforce_update", lambda *args, **kwargs: Unchanged())
    frozen = ratios(problem)
    assert all(f > l for f, l in zip(frozen, learned)) and min(frozen) > max(learned)
