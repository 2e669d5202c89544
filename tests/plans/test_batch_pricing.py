"""Many plans priced together (`batch_pricing.PlanBatchSimulator`): the same step times as
`simulate_plan` gives one at a time, failures included, each class of plans lowered once."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphs.export import export_model
from placer.graph.load import load_graph
from placer.plans.batch_pricing import PlanBatchSimulator
from placer.plans.data_parallel import data_parallel
from placer.plans.fsdp import fsdp
from placer.plans.plan import OpPlan, Plan
from placer.plans.pricing import simulate_plan
from placer.plans.scoring import PlanScorer
from placer.plans.search import group_units, unit_grouping
from placer.plans.space import configs, replan_groups
from plancases import matmul_relu, memory_bound

GPUS = [f"cuda:{i}" for i in range(4)]


@pytest.fixture(scope="module")
def transformer():
    return load_graph(export_model("transformer", batch=4, seq_len=8, layers=2, vocab=64))


def one_at_a_time(graph, plans, cluster) -> np.ndarray:
    found = [simulate_plan(graph, plan, cluster) for plan in plans]
    return np.asarray([m.step_time if m.ok else math.inf for m in found])


def searched_plans(graph, n: int, seed: int) -> list[Plan]:
    """Plans as the searches make them: from DDP or FSDP, groups set to random configs (whole, or
    split by batch or by weights over runs of GPUs), then single ops moved to random devices."""
    rng = np.random.default_rng(seed)
    members = group_units(unit_grouping(graph, data_parallel(graph, GPUS), 6))
    options = configs(GPUS)
    plans = []
    for k in range(n):
        start = (data_parallel if k % 2 else fsdp)(graph, GPUS)
        plan = replan_groups(graph, start, members, options, rng.integers(0, 2 * len(options), size=len(members)))
        ops = dict(plan.ops)
        for name in rng.choice(list(graph.nodes), size=8):
            if rng.random() < 0.7:
                ops[name] = OpPlan((GPUS[rng.integers(4)],))
        plans.append(Plan(plan.devices, ops, plan.graph_sha256, extra=plan.extra))
    return plans


def test_searched_plans_price_as_one_at_a_time(transformer):
    """Splits by batch and by weights, FSDP's stored weights, moved ops, and GPUs of 44 MiB so that
    some plans fail for memory: every figure equal, every failure a failure."""
    plans = searched_plans(transformer, 24, seed=0)
    for cluster in (memory_bound((2**40,) * 4), memory_bound((44 * 2**20,) * 4)):
        expected = one_at_a_time(transformer, plans, cluster)
        assert (PlanBatchSimulator(transformer, cluster).step_times(plans) == expected).all()
    assert np.isinf(expected).sum() not in (0, len(plans))   # the small GPUs fail some plans, not all


@pytest.mark.parametrize("memory", [2**40, 40 * 2**20])
def test_ops_moved_beside_a_split_share_one_lowering(transformer, memory):
    """A DDP block and every other op moved about: one class, lowered once, the same figures; on
    GPUs of 40 MiB some of them fail for memory, in the batched pass as alone."""
    cluster = memory_bound((memory,) * 4)
    names = list(transformer.nodes)
    ddp = data_parallel(transformer, GPUS)
    base = Plan(GPUS, {n: ddp.ops[n] if k < len(names) // 3 else OpPlan((GPUS[0],)) for k, n in enumerate(names)},
                transformer.sha256)
    sim = PlanBatchSimulator(transformer, cluster)
    pinned = {names[i] for i, _ in sim.class_key(base)[3]}
    rng = np.random.default_rng(1)
    plans = [Plan(GPUS, {n: op if n in pinned else OpPlan((GPUS[rng.integers(4)],)) for n, op in base.ops.items()},
                  transformer.sha256) for _ in range(40)]
    expected = one_at_a_time(transformer, plans, cluster)
    assert (sim.step_times(plans) == expected).all()
    assert sim.lowered == 1
    assert np.isinf(expected).any() == (memory < 2**30) and not np.isinf(expected).all()


def test_ops_around_a_split_lower_as_they_run():
    """What a split changes around it depends on where the ops beside it run: a whole producer's
    copy is cut where it runs, a whole reader gathers the pieces onto its device, a whole reader
    of a weight FSDP stores sharded gathers it there. Each of those moves over every GPU."""
    graph = matmul_relu(64, 256, 256, branches=2)
    cluster = memory_bound((2**40,) * 4)
    ddp, sharded = data_parallel(graph, GPUS[:2]), fsdp(graph, GPUS[:2])
    plans = []
    for a in GPUS:
        for b in GPUS:
            ops = {"mm0": ddp.ops["mm0"], "relu0": OpPlan((a,)), "mm1": OpPlan((b,)), "relu1": ddp.ops["relu1"]}
            plans.append(Plan(GPUS, ops, graph.sha256))
            stored = {"mm0": sharded.ops["mm0"], "relu0": OpPlan((a,)), "mm1": OpPlan((b,)), "relu1": OpPlan((b,))}
            plans.append(Plan(GPUS, stored, graph.sha256, extra=sharded.extra))
    assert (PlanBatchSimulator(graph, cluster).step_times(plans) == one_at_a_time(graph, plans, cluster)).all()


def test_a_device_the_cluster_lacks_fails_the_plan():
    graph = matmul_relu(8, 8, 8)
    cluster = memory_bound((2**40,) * 2)
    plan = Plan(["cuda:0", "cuda:7"], {"mm0": OpPlan(("cuda:7",)), "relu0": OpPlan(("cuda:0",))}, graph.sha256)
    assert not simulate_plan(graph, plan, cluster).ok
    assert PlanBatchSimulator(graph, cluster).step_times([plan]).tolist() == [math.inf]


def test_a_scorer_prices_a_batch_as_in_turn_and_stops_at_its_budget(transformer):
    cluster = memory_bound((44 * 2**20,) * 4)
    plans = searched_plans(transformer, 12, seed=2)
    in_turn = PlanScorer(transformer, cluster, samples=8)
    expected = [in_turn.time(p) for p in plans[:8]]
    batched = PlanScorer(transformer, cluster, samples=8)
    assert batched.times(plans) == expected and batched.simulated == 8 and batched.spent
    best = plans[int(np.argmin(expected))]
    assert math.isfinite(min(expected)) and not math.isfinite(max(expected))
    alone = simulate_plan(transformer, best, cluster)
    assert batched.measurement(best).peak_memory == alone.peak_memory   # the result's peaks, simulated for it
    assert batched.simulated == 8
