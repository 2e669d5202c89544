"""Searches over plans on a training step: each plan priced by `simulate_training`, starting from
the placements, DDP's and FSDP's plans, never slower than any of them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.costmodel.roofline import cluster_measurer
from placer.devices import as_devices
from placer.graph.load import load_graph
from placer.hardware import load_cluster
from placer.jobs.compare import simulated_comparison
from placer.placement import Placement
from placer.plans.data_parallel import data_parallel
from placer.plans.fsdp import fsdp
from placer.plans.mcmc import mcmc
from placer.plans.plan import Plan
from placer.plans.search import plan_search
from placer.plans.space import configs, plan_key, replan
from placer.plans.training import simulate_training
from placer.program.training import TrainingSpec
from plancases import gpu_pair, matmul_relu, memory_bound, pairwise_cluster, shared_weight_chains

FOUR = [f"cuda:{i}" for i in range(4)]
SEARCHES = [plan_search, mcmc]
PLANS = ("data_parallel", "fsdp", "plan_search", "mcmc")


def capped(cluster, nbytes: int):
    """`cluster` with GPUs of `nbytes` each."""
    return replace(cluster, devices=tuple(replace(d, model=replace(d.model, memory_bytes=nbytes))
                                          for d in cluster.devices))


def starts_of(graph) -> dict[str, Plan]:
    whole = {d: Plan.from_placement(Placement.single_device(list(graph.nodes), d, devices=FOUR)) for d in FOUR}
    return {"data_parallel": data_parallel(graph, FOUR), "fsdp": fsdp(graph, FOUR), **whole}


@pytest.mark.parametrize("search", SEARCHES)
def test_a_training_search_prices_training_steps_and_is_never_slower_than_its_starts(search):
    graph, cluster, spec = matmul_relu(64, 512, 512, branches=2), pairwise_cluster(4), TrainingSpec()
    starts = starts_of(graph)
    fastest = min(simulate_training(graph, p, cluster, spec).step_time for p in starts.values())
    found = search(graph, cluster, starts, samples=30, seed=1, training=spec)
    assert found.start_time == fastest and found.step_time <= fastest
    assert found.step_time == simulate_training(graph, found.plan, cluster, spec).step_time


@pytest.mark.parametrize("search", SEARCHES)
def test_the_same_seed_gives_the_same_training_plan(search):
    """Four GPUs bound by reading their bytes, and a budget too small to scan every move: the order
    the seed draws shapes the path (from FSDP's plan, the fastest start here)."""
    graph, cluster, spec = matmul_relu(4, 512, 512, branches=3), memory_bound((2**40,) * 4), TrainingSpec()
    runs = [search(graph, cluster, starts_of(graph), samples=10, seed=seed, training=spec) for seed in (3, 3, 4, 5, 6)]
    assert plan_key(graph, runs[0].plan) == plan_key(graph, runs[1].plan)
    assert runs[0].improvements == runs[1].improvements and runs[0].start == "fsdp"
    assert len({tuple(r.improvements) for r in runs}) > 1   # the seed matters: the check above can fail


def test_every_move_from_fsdp_prices_a_training_step_keeping_only_the_weights_still_read_as_fsdp_reads_them():
    """A move that takes a sharded weight's reader off FSDP's split leaves the weight unsharded (its
    gathers and reduce-scatters are FSDP's readers'), and DDP's and FSDP's plans are told apart."""
    graph, cluster, spec = matmul_relu(64, 512, 512, branches=2), pairwise_cluster(4), TrainingSpec()
    start = fsdp(graph, FOUR)
    assert plan_key(graph, start) != plan_key(graph, data_parallel(graph, FOUR))
    for config in configs(FOUR):
        moved = replan(graph, start, ["mm0"], config)
        kept = moved.extra["placer"].get("stored", {})
        assert "w1" in kept and ("w0" in kept) == (moved.ops["mm0"] == start.ops["mm0"])
        assert simulate_training(graph, moved, cluster, spec).ok


def test_a_training_comparison_searches_from_the_fsdp_row_where_only_it_fits():
    """GPUs of 3 MB: DDP's copy of the weight, its gradient and momentum does not fit, nor a
    placement's; FSDP's quarter does, so the searches start from it and are no slower."""
    graph = matmul_relu(64, 512, 512)
    cluster = capped(pairwise_cluster(4), 3_000_000)
    comparison = simulated_comparison(graph, as_devices(cluster.device_specs()), cluster, ["single", "m_etf"], None,
                                      30, 0, training=TrainingSpec(), plans=PLANS)
    assert not comparison.row("data_parallel").measurement.ok and comparison.row("fsdp").measurement.ok
    for name in ("plan_search", "mcmc"):
        row = comparison.row(name)
        assert row.measurement.ok and f"from fsdp ({comparison.row('fsdp').step_time * 1e3:.3f} ms)" in row.note
        assert row.step_time <= comparison.row("fsdp").step_time


def test_a_training_comparisons_plan_is_no_slower_than_every_placement_ddp_and_fsdp_row():
    graph, cluster = matmul_relu(64, 512, 512, branches=2), pairwise_cluster(4)
    comparison = simulated_comparison(graph, as_devices(cluster.device_specs()), cluster,
                                      ["single", "m_etf", "local_search"], None, 30, 0, training=TrainingSpec(),
                                      plans=PLANS)
    others = [r for r in comparison.rows if r.name not in ("plan_search", "mcmc")]
    assert {"data_parallel", "fsdp", "m_etf", "local_search"} <= {r.name for r in others if r.measurement.ok}
    for name in ("plan_search", "mcmc"):
        row = comparison.row(name)
        assert row.measurement.ok and row.measurement.protocol["objective"] == "training"
        assert row.step_time <= min(r.step_time for r in others if r.step_time)


def test_fsdps_weights_stay_sharded_over_its_gpus_where_the_search_also_moves_ops_to_the_cpu():
    """On 4 A100s and a CPU, the search's devices are all five and FSDP's only the GPUs: its start is
    priced as its row is, each weight a quarter on each GPU, none on the CPU."""
    graph, cluster, spec = matmul_relu(64, 512, 512), load_cluster("4xa100-nvlink"), TrainingSpec()
    start = fsdp(graph, FOUR)
    found = plan_search(graph, cluster, {"fsdp": start}, ["cpu:0", *FOUR], samples=1, training=spec)
    row = simulate_training(graph, start, cluster, spec)
    assert found.start_time == row.step_time and found.measurement.peak_memory == row.peak_memory


def shared_weight():
    """y = relu(x @ w) @ w: one weight read by two ops (nodes mm0, relu, mm1)."""
    w = numpy_helper.from_array(np.ones((256, 256), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm0"), helper.make_node("Relu", ["m"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="mm1")]
    graph = helper.make_graph(nodes, "shared_weight", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 256])], [w])
    return load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("search", SEARCHES)
def test_a_placement_start_scores_its_training_step_as_a_comparison_row_does(search):
    """A weight read on two devices: the placement's step copies it to the second and sends its
    gradient back, where a lowered plan would keep a replica on each and all-reduce; the search
    scores the placement as its row, so it is never slower than that row."""
    graph, cluster, spec = shared_weight(), pairwise_cluster(4), TrainingSpec()
    placement = Placement(FOUR, {"mm0": "cuda:0", "relu": "cuda:0", "mm1": "cuda:1"}, graph.sha256)
    row = cluster_measurer(cluster, graph, training=spec).measure(placement).step_time
    found = search(graph, cluster, {"split": Plan.from_placement(placement)}, samples=20, seed=0, training=spec)
    assert found.start_time == row and found.step_time <= row


def test_the_readers_of_a_shared_weight_move_together():
    """Two chains, each reading its own weight at every step (an unrolled recurrent net), start with
    every other step's MatMul on the other GPU, so each weight's gradient is summed over the link in
    every step. One move takes a weight's readers together: within 100 plans the search reaches each
    chain whole on a GPU of its own, where moves of groups and stages alone end slower."""
    graph, cluster, spec = shared_weight_chains(4), gpu_pair(flops=1e12, link=1e9), TrainingSpec()
    two = ["cuda:0", "cuda:1"]

    def gpu(name: str, spread: bool) -> str:
        chain, step = int(name.split("_")[0][-1]), int(name.split("_")[1])
        return two[(chain + (step % 2 if spread and name.startswith("mm") else 0)) % 2]

    spread, apart = (Plan.from_placement(Placement(two, {n: gpu(n, s) for n in graph.nodes})) for s in (True, False))
    found = plan_search(graph, cluster, {"spread": spread}, two, samples=100, seed=0, training=spec)
    assert found.step_time == simulate_training(graph, apart, cluster, spec).step_time
    assert found.step_time < 0.6 * found.start_time
