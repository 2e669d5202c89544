"""The lower bound over plans: no plan, however it splits ops, simulates below it, where plans do
pass under the placements' bound (a chain split four ways is a quarter of its fastest device)."""

from __future__ import annotations

import numpy as np
import pytest

from placer.costmodel import lower_bound as bounds
from placer.costmodel.roofline import RooflineCostModel
from placer.devices import as_devices
from placer.graph.load import load_graph
from placer.hardware import load_cluster
from placer.jobs.compare import simulated_comparison
from placer.plans.data_parallel import data_parallel
from placer.plans.pricing import simulate_plan
from placer.program.training import TrainingSpec
from plancases import matmul_relu

PLANS = ("data_parallel", "fsdp", "tensor_parallel", "pipeline_data", "data_parallel_by_speed", "plan_search")


@pytest.fixture(scope="module")
def gpt():
    from graphs.export import export_model

    return load_graph(export_model("transformer", batch=8, seq_len=16, layers=2, vocab=256))


def program_of(links):
    """A simulated program of steps reading and writing the named tensors (inputs, outputs), in order."""
    from placer.costmodel.sim_program import SimProgram
    from placer.program.walk import Step

    steps = [Step(f"s{i}", "Relu", tuple(inputs), tuple(outputs)) for i, (inputs, outputs) in enumerate(links)]
    return SimProgram(steps, list(range(len(steps))), [], set(), lambda tensor: 0, [])


def rows_and_bounds(graph, cluster_name: str, training=None):
    cluster = load_cluster(cluster_name)
    comparison = simulated_comparison(graph, as_devices(cluster.device_specs()), cluster, ["m_etf", "heft"], None, 20,
                                      0, training=training, plans=PLANS)
    return comparison, [r for r in comparison.rows if r.step_time is not None]


@pytest.mark.parametrize("cluster_name", ["4xa100-nvlink", "paper-4xk40", "8xh100-nvlink"])
@pytest.mark.parametrize("training", [None, TrainingSpec()], ids=["inference", "training"])
def test_no_plan_row_simulates_below_the_bound_over_plans(gpt, cluster_name, training):
    comparison, rows = rows_and_bounds(gpt, cluster_name, training)
    plans = [r for r in rows if r.plan]
    bound = comparison.plan_bound
    assert len(plans) >= 2 and bound is not None
    assert bound.value <= comparison.lower_bound.value
    # on this small model the path-energy bound is the one that holds the plans up (1.1-1.5x the others)
    assert bound.value == bound.path_energy > 1.1 * max(bound.critical_path, bound.load)
    for row in rows:
        assert row.ratio_to_lower_bound >= 1.0, row.name
    assert {r.name for r in plans} >= {"data_parallel", "plan_search"}


def test_a_chain_split_over_four_gpus_passes_under_the_placements_bound_not_under_the_plans():
    """DDP of a matmul chain at batch 4096 on four A100s: under the placements' bound (the chain on
    its fastest device), above the plans' (each op over the four at once)."""
    graph, cluster = matmul_relu(4096, 1024, 1024), load_cluster("4xa100-nvlink")
    gpus = [d.name for d in cluster.devices if d.name.startswith("cuda")]
    cost = RooflineCostModel(cluster, graph)
    devices = [d.name for d in cluster.devices]
    ddp = simulate_plan(graph, data_parallel(graph, gpus), cluster).step_time
    placements = bounds.lower_bound(graph, devices, cost)
    plans = bounds.plan_lower_bound(graph, devices, cost)
    assert ddp < 0.5 * placements.value
    assert plans.value <= ddp < 1.5 * plans.value


def test_split_time_is_one_device_or_all_at_once_under_contention():
    import numpy as np

    times = np.asarray([[4.0, 4.0], [1.0, 100.0]])
    assert bounds.split_time(times, [1.0, 1.0]).tolist() == [2.0, pytest.approx(100 / 101)]
    # slowed 3x while the other runs: splitting no longer pays, one device alone is faster
    assert bounds.split_time(times, [3.0, 3.0]).tolist() == [4.0, 1.0]
    # each shard pays its launch (0.5 s) whole: halves of 3.5 s of work after it, not halves of 4 s
    assert bounds.split_time(times, [1.0, 1.0], [0.5, 0.5]).tolist() == [2.25, pytest.approx(0.5 + 1 / (2 + 1 / 99.5))]


def test_the_bound_over_plans_counts_each_shards_launch_on_a_chain_of_small_ops():
    """A tiny matmul and its relu on four A100s: each step split four ways still pays a launch, so the
    critical path is the chain's launches at least (without them it fell to a quarter of that)."""
    graph, cluster = matmul_relu(8, 16, 16), load_cluster("4xa100-nvlink")
    cost = RooflineCostModel(cluster, graph)
    devices = [d.name for d in cluster.devices if d.name.startswith("cuda")]
    launches = len(graph.nodes) * min(cost.launch_overhead(d) for d in devices)
    assert launches <= bounds.plan_lower_bound(graph, devices, cost).critical_path


def test_the_path_energy_bound_holds_a_chain_and_its_side_steps_at_once():
    """n chain steps, each with a side step hanging off it, every step 1 s of launch and 4 s of work
    on any of four like devices. The chain split four ways takes 2 s a step and the last side step 2 s
    (critical path 2n + 2), and all the work spread takes 10/4 s a pair (load 2.5n); but the split
    chain keeps every device busy, so the side steps find no room. With lam = 0.25 and equal weights,
    a step on the path (the chain and the last side step) costs at least min over k devices of
    lam (1 + 4/k) + (1 - lam)(k/4 + 1) = 1.875 (k = 2), every other side step (1 - lam) 1.25 = 0.9375:
    (n + 1) 1.875 + (n - 1) 0.9375; the best lam, 3/11, gives a little more."""
    from placer.costmodel.path_energy import path_energy_bound

    n = 10
    links = []
    for i in range(n):
        links += [([f"c{i - 1}"] if i else [], [f"c{i}"]), ([f"c{i}"], [f"s{i}"])]
    times = np.full((2 * n, 4), 5.0)
    bound = path_energy_bound(program_of(links), times, [1.0] * 4, [1.0] * 4, [[1, 1, 1, 1]])
    at_quarter, best = (n + 1) * 1.875 + (n - 1) * 0.9375, (n + 1) * 21 / 11 + (n - 1) * 1.25 * 8 / 11
    assert at_quarter - 1e-9 <= bound <= best + 1e-9
    assert bound > 1.15 * max(2 * n + 2, 2.5 * n)


def test_the_path_energy_bound_is_left_out_where_every_device_is_its_own_kind_of_many():
    """Nine devices each unlike the others are 511 sets, past MAX_SETS: 0 (no bound), not 2^9-column tables."""
    from placer.costmodel.path_energy import MAX_SETS, path_energy_bound

    program = program_of([([], ["a"]), (["a"], ["b"])])
    times = np.tile(np.arange(1.0, 10.0), (2, 1))
    assert 2 ** 9 - 1 > MAX_SETS
    assert path_energy_bound(program, times, [0.1] * 9, [1.0] * 9, [[1.0] * 9]) == 0.0
    assert path_energy_bound(program, times[:, :8], [0.1] * 8, [1.0] * 8, [[1.0] * 8]) > 0.0
