"""The exact solver over plans (`placer.plans.exact_plans`): CP-SAT choosing each group's device or
batch split, its plan kept only where it simulates faster than the fastest start."""

from __future__ import annotations

import pytest

from placer.devices import as_devices
from placer.jobs.compare import simulated_comparison
from placer.placement import Placement
from placer.plans import exact_plans
from placer.plans.data_parallel import data_parallel
from placer.plans.exact_plans import blocks, plan_exact
from placer.plans.mcmc import mcmc
from placer.plans.layout import Shard
from placer.plans.plan import Plan
from placer.plans.pricing import simulate_plan
from placer.plans.search import plan_search
from placer.plans.space import plan_key
from placer.plans.training import simulate_training
from placer.program.training import TrainingSpec
from plancases import embedding_mlp, gpu_pair, matmul_relu, memory_bound, pairwise_cluster

TWO = ["cuda:0", "cuda:1"]


def starts_of(graph, devices) -> dict[str, Plan]:
    """DDP's plan and each device's placement."""
    whole = {d: Plan.from_placement(Placement.single_device(list(graph.nodes), d, devices=devices)) for d in devices}
    return {"data_parallel": data_parallel(graph, devices), **whole}


def test_blocks_are_the_accelerators_and_their_aligned_halves_down_to_pairs():
    eight = [f"cuda:{i}" for i in range(8)]
    assert blocks(eight) == [tuple(eight), tuple(eight[:4]), tuple(eight[4:]),
                             *(tuple(eight[i:i + 2]) for i in range(0, 8, 2))]
    assert blocks(["cpu:0", "cuda:0", "cuda:1", "cuda:2"]) == [("cuda:0", "cuda:1", "cuda:2"), ("cuda:0", "cuda:1")]
    assert blocks(["cpu:0", "cpu:1"]) == [("cpu:0", "cpu:1")]


def test_it_finds_the_recommenders_plan_table_whole_and_mlp_split_where_the_other_searches_do_not():
    """DLRM's plan, worked out: the table's gradient (51 MB) all-reduced over the 10 GB/s link costs
    DDP more than the MLP's split saves, so the table stays whole on one GPU and only the MLP's
    batch is split. Every start is slower; local search and MCMC end at plans that split the table
    too (9.1 and 8.9 ms), slower still; red with no split options."""
    graph, cluster, spec = embedding_mlp(), gpu_pair(), TrainingSpec()
    starts = starts_of(graph, TWO)
    fastest = min(simulate_training(graph, p, cluster, spec).step_time for p in starts.values())
    found = plan_exact(graph, cluster, starts, TWO, samples=20, training=spec)
    assert found.plan.ops["embed"].devices in (("cuda:0",), ("cuda:1",))
    assert all(found.plan.ops[n].devices == tuple(TWO) for n in ("mm1", "relu1", "mm2", "relu2", "mm3"))
    assert found.step_time == simulate_training(graph, found.plan, cluster, spec).step_time
    assert found.step_time < 0.8 * fastest   # 8.7 ms against 12.3 ms on one GPU, 14.1 ms DDP's
    for search in (plan_search, mcmc):
        other = search(graph, cluster, starts, TWO, samples=60, training=spec)
        assert found.step_time < other.step_time and len(other.plan.ops["embed"].devices) == 2
    assert found.samples <= 20


def test_it_is_never_slower_than_its_fastest_start_and_the_same_seed_gives_the_same_plan():
    """Four GPUs whose ops take their launches: the model's copies and launches are rough, so where
    its plan simulates slower, the start stands."""
    graph, cluster, spec = matmul_relu(64, 512, 512, branches=3), pairwise_cluster(4), TrainingSpec()
    four = [f"cuda:{i}" for i in range(4)]
    starts = starts_of(graph, four)
    fastest = min(simulate_training(graph, p, cluster, spec).step_time for p in starts.values())
    runs = [plan_exact(graph, cluster, starts, four, samples=20, training=spec) for _ in range(2)]
    assert runs[0].start_time == fastest and runs[0].step_time <= fastest
    assert plan_key(graph, runs[0].plan) == plan_key(graph, runs[1].plan)


def test_a_plan_the_model_prefers_but_the_simulator_finds_slower_is_not_kept(monkeypatch):
    """The model's copies never queue and its groups run whole: where its choice (here forced: every
    group on one GPU) simulates slower than the start (DDP's), the start stands."""
    graph, cluster = matmul_relu(256, 1024, 1024, branches=2), memory_bound()
    starts = {"data_parallel": data_parallel(graph, TWO)}
    monkeypatch.setattr(exact_plans, "solve_options", lambda model, hint, *a, **k: [0] * len(hint))
    found = plan_exact(graph, cluster, starts, TWO, samples=20)
    assert found.step_time == found.start_time < simulate_plan(graph, starts_of(graph, TWO)["cuda:0"], cluster).step_time
    assert plan_key(graph, found.plan) == plan_key(graph, starts["data_parallel"])


def test_compare_prices_it_as_a_plan_row_on_inference_too():
    graph, cluster = embedding_mlp(batch=1024), gpu_pair()
    devices = as_devices(cluster.device_specs())
    comparison = simulated_comparison(graph, devices, cluster, ["single"], None, 20, 0,
                                      plans=("data_parallel", exact_plans.NAME))
    row = comparison.row(exact_plans.NAME)
    assert row.measurement.ok
    assert row.step_time <= min(r.step_time for r in comparison.rows if r.name != exact_plans.NAME and r.step_time)


@pytest.mark.parametrize("groups", [1, 3])
def test_few_groups_still_give_a_plan_that_runs(groups):
    graph, cluster, spec = embedding_mlp(), gpu_pair(), TrainingSpec()
    found = plan_exact(graph, cluster, starts_of(graph, TWO), TWO, samples=20, training=spec, groups=groups)
    assert found.measurement.ok


def test_over_a_fast_and_a_slow_gpu_it_cuts_the_heavy_op_by_speed_and_keeps_the_rest_on_the_fast_one():
    """cuda:0 three times cuda:1's speed: the even split waits for the slow half, the batch cut by
    speed everywhere pays for its copies (0.83 s), the fast GPU alone does all the work (0.64 s).
    The plan found mixes: the heavy conv cut 16:5 (`space.BY_SPEED`), the rest whole on cuda:0
    (0.57 s, simulated). Red with no by-speed options."""
    from placer.costmodel.roofline import RooflineCostModel
    from placer.plans.data_parallel_by_speed import data_parallel_by_speed
    from plancases import conv_net, fast_and_slow

    graph, cluster = conv_net(batch=8, size=128, channels=128), fast_and_slow()
    by_speed = simulate_plan(graph, data_parallel_by_speed(graph, TWO, RooflineCostModel(cluster, graph)), cluster)
    found = plan_exact(graph, cluster, starts_of(graph, TWO), TWO, samples=20)
    assert found.step_time < 0.95 * found.start_time and found.step_time < 0.8 * by_speed.step_time
    assert found.plan.ops["conv"].outputs[0] == Shard(0, (16, 5))
    assert all(found.plan.ops[n].devices == ("cuda:0",) for n in ("relu", "pool", "flatten", "fc"))
    assert found.step_time == simulate_plan(graph, found.plan, cluster).step_time


def test_a_split_the_lowering_cannot_make_is_left_out_not_a_crash(monkeypatch):
    """Where the whole graph cannot be lowered split over a block, no group takes that option: the
    search goes on over the others (here every device whole) and still returns a plan that runs."""
    from placer.errors import PlacerError

    def refuse(*args, **kwargs):
        raise PlacerError("no such layout")

    monkeypatch.setattr(exact_plans, "_split_program", refuse)
    graph, cluster, spec = embedding_mlp(), gpu_pair(), TrainingSpec()
    found = plan_exact(graph, cluster, starts_of(graph, TWO), TWO, samples=20, training=spec)
    assert found.measurement.ok and found.step_time <= found.start_time
