"""Plans on a training step: DDP's gradient all-reduce in buckets beside the backward pass, FSDP's
sharded weights, and their rows in a simulated comparison. Figures worked out by hand on GPUs
whose every step takes its launch (`plancases`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from placer.costmodel.roofline import cluster_measurer
from placer.devices import as_devices
from placer.jobs.compare import simulated_comparison
from placer.measure.measurement import OOM
from placer.placement import Placement
from placer.plans.data_parallel import data_parallel
from placer.plans.fsdp import fsdp
from placer.plans.lower import lower
from placer.plans.replicas import own_copies
from placer.plans.training import simulate_training, training_measurer
from placer.program.training import OptimizerSpec, TrainingSpec
from plancases import BANDWIDTH, LATENCY, LAUNCH, conv_net, matmul_relu, pairwise_cluster

FOUR = [f"cuda:{i}" for i in range(4)]
N = len(FOUR)


def quarter_step(cluster, graph, spec=TrainingSpec()):
    """The training step of `graph` (a quarter of the batch) whole on cuda:0."""
    return cluster_measurer(cluster, graph, training=spec).measure(
        Placement.single_device(list(graph.nodes), "cuda:0", devices=FOUR))


def capped(cluster, nbytes: int):
    """`cluster` with GPUs of `nbytes` each."""
    return replace(cluster, devices=tuple(replace(d, model=replace(d.model, memory_bytes=nbytes))
                                          for d in cluster.devices))


def hops(nbytes: int) -> float:
    """One ring step over a pairwise link, carrying `nbytes`."""
    return LATENCY + nbytes / BANDWIDTH


def test_a_ddp_step_is_a_quarter_batch_step_and_then_the_all_reduce_of_its_gradients():
    """One 8x8 weight per branch, two branches: one bucket (512 bytes), ready when the last backward
    step is done, so nothing overlaps it: a launch and 2(n-1) ring steps of a quarter of it each."""
    cluster = pairwise_cluster(N)
    graph = matmul_relu(8, 8, 8, branches=2)
    ddp = simulate_training(graph, data_parallel(graph, FOUR), cluster, TrainingSpec())
    quarter = quarter_step(cluster, matmul_relu(2, 8, 8, branches=2))
    assert ddp.ok and ddp.step_time == pytest.approx(quarter.step_time + LAUNCH + 2 * (N - 1) * hops(128), rel=1e-12)


def test_a_bucket_all_reduces_beside_the_backward_steps_still_to_run():
    """Buckets of one weight each, ops of 100 us: branch 1's gradients are ready first, and their
    all-reduce (130 us) hides behind branch 0's backward (400 us), so only the last bucket's
    all-reduce adds to the quarter-batch step (not both, 260 us, as without overlap)."""
    launch = 1e-4
    cluster = pairwise_cluster(N, launch=launch)
    graph = matmul_relu(8, 8, 8, branches=2)
    ddp = simulate_training(graph, data_parallel(graph, FOUR), cluster, TrainingSpec(), bucket_bytes=256)
    quarter = quarter_step(cluster, matmul_relu(2, 8, 8, branches=2))
    assert ddp.step_time == pytest.approx(quarter.step_time + launch + 2 * (N - 1) * hops(64), rel=1e-12)


BIG = 1024   # a 4 MiB weight, beside which a quarter batch's activations are small
W = BIG * BIG * 4


def test_fsdp_gathers_each_weight_for_the_forward_and_the_backward_and_reduce_scatters_its_gradient():
    """Three collectives of (n-1) ring steps of a quarter of the weight each, none hidden in a
    one-op net."""
    cluster = pairwise_cluster(N)
    graph = matmul_relu(8, BIG, BIG)
    step = simulate_training(graph, fsdp(graph, FOUR), cluster, TrainingSpec()).step_time
    quarter = quarter_step(cluster, matmul_relu(2, BIG, BIG)).step_time
    assert step == pytest.approx(quarter + 3 * (LAUNCH + (N - 1) * hops(W // N)), rel=1e-12)


def test_fsdp_holds_a_quarter_of_the_weights_gradients_and_optimizer_state_and_the_cap_counts_them():
    """At its peak (the backward of the matmul) a device holds its slice of the weight and of its
    momentum, the weight gathered again and its whole gradient before the reduce-scatter, and the
    activations a quarter batch holds alone (its peak less its weight, gradient and momentum)."""
    cluster = pairwise_cluster(N)
    graph, alone = matmul_relu(8, BIG, BIG), quarter_step(cluster, matmul_relu(2, BIG, BIG))
    activations = alone.peak_memory["cuda:0"] - 3 * W
    peaks = simulate_training(graph, fsdp(graph, FOUR), cluster, TrainingSpec()).peak_memory
    assert peaks == {d: 2 * W // N + 2 * W + activations for d in FOUR}
    ddp = simulate_training(graph, data_parallel(graph, FOUR), cluster, TrainingSpec()).peak_memory
    assert all(ddp[d] > peaks[d] for d in FOUR)
    # the caps hold: a GPU one byte short of FSDP's peak fails it, and one that fits it fails DDP
    for cap, fits in ((peaks["cuda:0"] - 1, False), (peaks["cuda:0"], True)):
        m = simulate_training(graph, fsdp(graph, FOUR), capped(cluster, cap), TrainingSpec())
        assert m.ok == fits and (fits or (m.failure == OOM and "cuda:0 needs" in m.reason))
    assert simulate_training(graph, data_parallel(graph, FOUR), capped(cluster, peaks["cuda:0"]),
                             TrainingSpec()).failure == OOM


def test_fsdp_keeps_a_quarter_of_the_optimizer_state_ddp_keeps():
    """SGD's momentum, one weight's bytes: all of it on each DDP device, a quarter on each FSDP one."""
    cluster = pairwise_cluster(N)
    graph = matmul_relu(8, BIG, BIG)
    for build, state in ((data_parallel, W), (fsdp, W // N)):
        with_state, without = (simulate_training(graph, build(graph, FOUR), cluster,
                                                 TrainingSpec(optimizer=OptimizerSpec(momentum=m))).peak_memory
                               for m in (0.9, 0.0))
        assert {d: with_state[d] - without[d] for d in FOUR} == {d: state for d in FOUR}, build.__name__


def weight_bytes(graph, plan) -> dict[str, int]:
    """Bytes of the weights each device of the lowered training step holds."""
    lowered, _ = own_copies(lower(graph, plan))
    held = dict.fromkeys(FOUR, 0)
    for device in FOUR:
        read = {t for n, node in lowered.graph.nodes.items() if lowered.placement.nodes[n] == device
                for t in node.inputs if t in lowered.graph.initializers}
        held[device] = sum(lowered.graph.initializers[t].nbytes for t in read)
    return held


def test_an_fsdp_device_holds_a_quarter_of_the_weights_a_ddp_device_holds():
    graph = matmul_relu(8, 8, 8, branches=2)   # two weights of 8 rows: slices of 2 rows
    ddp, sharded = weight_bytes(graph, data_parallel(graph, FOUR)), weight_bytes(graph, fsdp(graph, FOUR))
    assert ddp == {d: graph.total_param_bytes for d in FOUR}
    assert sharded == {d: graph.total_param_bytes // N for d in FOUR}


def test_a_training_comparison_has_ddp_and_fsdp_rows_and_an_inference_one_notes_fsdp():
    cluster, graph = pairwise_cluster(N), conv_net(batch=8)
    devices = as_devices(cluster.device_specs())
    trained = simulated_comparison(graph, devices, cluster, ["single"], None, None, 0, training=TrainingSpec(),
                                   plans=("data_parallel", "fsdp"))
    for name, build in (("data_parallel", data_parallel), ("fsdp", fsdp)):
        row = trained.row(name)
        assert row.measurement.ok and row.step_time == simulate_training(graph, build(graph, FOUR), cluster,
                                                                         TrainingSpec()).step_time
    inferred = simulated_comparison(graph, devices, cluster, ["single"], None, None, 0, plans=("data_parallel", "fsdp"))
    assert inferred.row("data_parallel").measurement.ok and inferred.row("fsdp") is None
    assert any(n.startswith("fsdp: not simulated") and "training" in n for n in inferred.notes)


def test_the_batched_simulator_prices_a_training_plan_as_the_simulator_does():
    """Side steps (the collectives' streams) included: the same figures, not close ones."""
    cluster, graph = pairwise_cluster(N, launch=1e-4), matmul_relu(8, 8, 8, branches=2)
    for plan in (data_parallel(graph, FOUR), fsdp(graph, FOUR)):
        measurer, placement = training_measurer(graph, plan, cluster, TrainingSpec(), bucket_bytes=256)
        one, (batched,) = measurer.measure(placement), measurer.measure_many([placement])
        assert (batched.step_time, batched.peak_memory) == (one.step_time, one.peak_memory)
