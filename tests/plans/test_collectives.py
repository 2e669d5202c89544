"""Collectives priced as NCCL's ring runs them over the cluster's routes, queued on shared links.

Every op of these clusters takes exactly its launch (`plancases.instant_gpu`), so a plan's step
time is launches plus copies, worked out by hand: mm's shards, the collective's one kernel and
relu's shards each launch once; a ring step is one copy of an n-th of the tensor over one link.
"""

from __future__ import annotations

import pytest

from placer.plans.layout import PARTIAL, REPLICATE, Shard
from placer.plans.lower import lower
from placer.plans.plan import OpPlan, Plan
from placer.plans.pricing import simulate_plan
from plancases import BANDWIDTH, LATENCY, LAUNCH, bus_cluster, matmul_relu, pairwise_cluster

N = 4
DEVICES = tuple(f"cuda:{i}" for i in range(N))
M, K, COLS = 8, 16, 1000
TENSOR = M * COLS * 4   # bytes of mm's output, float32

# mm's split and relu's, and what turns the first into the second
SPLITS = {
    "all-reduce": (OpPlan(DEVICES, (Shard(1), Shard(0)), (PARTIAL,)), OpPlan(DEVICES)),
    "all-gather": (OpPlan(DEVICES, (Shard(0), REPLICATE), (Shard(0),)), OpPlan(DEVICES)),
    "reduce-scatter": (OpPlan(DEVICES, (Shard(1), Shard(0)), (PARTIAL,)), OpPlan(DEVICES, (Shard(0),), (Shard(0),))),
    "all-to-all": (OpPlan(DEVICES, (REPLICATE, Shard(1)), (Shard(1),)), OpPlan(DEVICES, (Shard(0),), (Shard(0),))),
}


def plan_of(mm: OpPlan, relu: OpPlan, branch: int = 0) -> dict[str, OpPlan]:
    return {f"mm{branch}": mm, f"relu{branch}": relu}


def ring_step(nbytes: float) -> float:
    return LATENCY + nbytes / BANDWIDTH


@pytest.mark.parametrize("collective, steps", [("all-reduce", 2 * (N - 1)), ("all-gather", N - 1),
                                               ("reduce-scatter", N - 1)])
def test_a_ring_collective_is_its_steps_of_an_nth_of_the_bytes_over_a_link_plus_one_launch(collective, steps):
    """All-reduce: 2(n-1) steps of bytes/n, so 2(n-1)/n x bytes / bandwidth plus 2(n-1) link
    latencies and its launch; all-gather and reduce-scatter half of that."""
    graph = matmul_relu(M, K, COLS)
    step = simulate_plan(graph, Plan(list(DEVICES), plan_of(*SPLITS[collective])), pairwise_cluster(N)).step_time
    assert step == pytest.approx(3 * LAUNCH + steps * ring_step(TENSOR / N), rel=1e-9)
    if collective == "all-reduce":
        assert step - 3 * LAUNCH == pytest.approx(2 * (N - 1) / N * TENSOR / BANDWIDTH + 2 * (N - 1) * LATENCY)


def sent_per_device(lowered) -> dict[str, int]:
    """Bytes each device sends: every tensor once to each other device that reads it."""
    where, sent = lowered.placement.nodes, {d: 0 for d in DEVICES}
    for node in lowered.graph.nodes.values():
        for info in node.output_info:
            readers = {where[r] for r in lowered.graph.consumers.get(info.name, ())} - {where[node.name]}
            sent[where[node.name]] += info.nbytes * len(readers)
    return sent


@pytest.mark.parametrize("collective, share", [("all-reduce", 2 * (N - 1) / N), ("all-gather", (N - 1) / N),
                                               ("reduce-scatter", (N - 1) / N), ("all-to-all", (N - 1) / N / N)])
def test_each_device_sends_what_nccl_bus_bandwidth_counts(collective, share):
    """nccl-tests' bus bandwidth: an all-reduce moves 2(n-1)/n of the bytes per device, an
    all-gather or reduce-scatter (n-1)/n; an all-to-all sends (n-1)/n of each device's n-th."""
    lowered = lower(matmul_relu(M, K, COLS), Plan(list(DEVICES), plan_of(*SPLITS[collective])))
    assert sent_per_device(lowered) == {d: pytest.approx(share * TENSOR) for d in DEVICES}


def two_all_reduces(cluster, first: tuple[str, ...], second: tuple[str, ...]) -> float:
    """The step of two independent branches, each reduced-axis mm then replicated relu, on launch-free GPUs."""
    ops = {}
    for b, devices in enumerate((first, second)):
        ops.update(plan_of(OpPlan(devices, (Shard(1), Shard(0)), (PARTIAL,)), OpPlan(devices), b))
    plan = Plan(list(dict.fromkeys(first + second)), ops)
    return simulate_plan(matmul_relu(M, K, COLS, branches=2), plan, cluster).step_time


def one_all_reduce(cluster, devices: tuple[str, ...]) -> float:
    plan = Plan(list(devices), plan_of(OpPlan(devices, (Shard(1), Shard(0)), (PARTIAL,)), OpPlan(devices)))
    return simulate_plan(matmul_relu(M, K, COLS), plan, cluster).step_time


def test_two_all_reduces_over_one_shared_link_take_twice_as_long_as_one():
    """Their ring steps are copies over the same bus, which carries one at a time."""
    bus = bus_cluster(1, 3, launch=0.0)
    devices = ("cuda:0", "cuda:1", "cuda:2")
    one = one_all_reduce(bus, devices)
    # 2(n-1) steps, each n copies of bytes/n one after another on the bus
    assert one == pytest.approx(2 * 2 * 3 * ring_step(TENSOR / 3), rel=1e-9)
    assert two_all_reduces(bus, devices, devices) == pytest.approx(2 * one, rel=1e-9)


def test_two_all_reduces_over_links_of_their_own_take_as_long_as_one():
    buses = bus_cluster(2, 3, launch=0.0)
    first, second = ("cuda:0", "cuda:1", "cuda:2"), ("cuda:3", "cuda:4", "cuda:5")
    assert two_all_reduces(buses, first, second) == pytest.approx(one_all_reduce(buses, first), rel=1e-9)
