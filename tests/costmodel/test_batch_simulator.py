"""The batched simulator gives exactly what the one-placement simulator gives, row by row: step
times, peaks and failures, on described clusters with shared links, with tight memory caps, for
training and pipelined steps, whatever the chunking or the sort it takes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import placer.costmodel.batch_simulator as batch_simulator
from placer.costmodel.batch_simulator import simulate_batch
from placer.costmodel.roofline import RooflineCostModel
from placer.costmodel.simulator import AnalyticCostModel, SimulatedMeasurer, Simulator
from placer.devices import as_devices
from placer.graph.load import load_graph
from placer.hardware import load_cluster
from placer.measure.measurement import INVALID, OOM
from placer.placement import Placement
from placer.program.pipeline import Pipeline
from placer.program.training import TrainingSpec
from testgraphs import branches

# Shared PCIe bridges (the paper's K40s), a network link two machines share, NVLink, a CPU and two unlike GPUs.
CLUSTERS = ["paper-4xk40", "2x2gpu-25gbe", "dgx1-v100", "cpu-fast-slow-gpu"]
WIDTH = 32


def fan_dag(n: int, seed: int):
    """`n` ops over [8, WIDTH] tensors, each reading one or two random earlier tensors (so many are
    read by several ops, often on several devices), a MatMul's weight sometimes shared by two."""
    rng = np.random.default_rng(seed)
    weights = [numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32), f"w{k}")
               for k in range(n // 3)]
    tensors, nodes, read = ["x"], [], set()
    for i in range(n):
        picked = sorted({tensors[j] for j in rng.integers(0, len(tensors), size=rng.integers(1, 3))})
        read.update(picked)
        if len(picked) == 2:
            nodes.append(helper.make_node("Add", picked, [f"t{i}"], name=f"add{i}"))
        else:
            nodes.append(helper.make_node("MatMul", [picked[0], f"w{rng.integers(0, len(weights))}"], [f"t{i}"],
                                          name=f"mm{i}"))
        tensors.append(f"t{i}")
    outputs = [t for t in tensors[1:] if t not in read] or [tensors[-1]]
    used = {i for node in nodes for i in node.input}
    graph = helper.make_graph(nodes, "fan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, WIDTH])],
                              [helper.make_tensor_value_info(t, TensorProto.FLOAT, [8, WIDTH]) for t in outputs],
                              [w for w in weights if w.name in used])
    return load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


GRAPHS = {"fan": lambda: fan_dag(60, seed=1), "branches": lambda: load_graph(branches(4, 4, width=WIDTH))}


@pytest.fixture(scope="module", params=list(GRAPHS))
def graph(request):
    return GRAPHS[request.param]()


def simulator(graph, cluster_name: str, caps=None, **options) -> Simulator:
    cluster = load_cluster(cluster_name)
    caps = caps if caps is not None else [d.mem_cap for d in as_devices(cluster.device_specs())]
    return Simulator(graph, cluster.device_names, RooflineCostModel(cluster, graph), caps, **options)


def random_rows(sim: Simulator, count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, len(sim.devices), size=(count, len(sim.node_names)))


def assert_one_at_a_time(sim: Simulator, rows: np.ndarray, peaks: bool = True):
    """Every row of the batch equals `sim.simulate(row)`: ==, not approx."""
    batch = simulate_batch(sim, rows, peaks=peaks)
    assert len(batch.failure) == len(rows)
    for k, row in enumerate(rows.tolist()):
        one = sim.simulate(row)
        assert (batch.failure[k], batch.step_time[k]) == (one.failure, one.step_time), f"row {k}"
        if peaks:
            assert batch.peak_memory[k].tolist() == one.peak_memory, f"row {k}"
    assert peaks or batch.peak_memory is None
    return batch


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_random_placements_on_described_clusters_equal_the_one_placement_pass(graph, cluster):
    sim = simulator(graph, cluster)
    rows = random_rows(sim, 150)
    batch = assert_one_at_a_time(sim, rows)
    assert all(f is None for f in batch.failure) and np.ptp(batch.step_time) > 0
    assert_one_at_a_time(sim, rows, peaks=False)


def test_devices_that_slow_each_other_down_equal_the_one_placement_pass(graph):
    """A described cluster with contention (as describe-local writes it): each device runs slower
    while another is busy, and the step grows by the same seconds in both passes."""
    import dataclasses

    cluster = load_cluster("2x2gpu-25gbe")
    cluster = dataclasses.replace(cluster, devices=tuple(dataclasses.replace(d, contention=1.0 + 0.1 * (k + 1))
                                                         for k, d in enumerate(cluster.devices)))
    caps = [d.mem_cap for d in as_devices(cluster.device_specs())]
    sim = Simulator(graph, cluster.device_names, RooflineCostModel(cluster, graph), caps)
    rows = random_rows(sim, 100, seed=3)
    batch = assert_one_at_a_time(sim, rows)
    assert_one_at_a_time(sim, rows, peaks=False)
    # the premise: contention moves the step times
    plain = simulate_batch(simulator(graph, "2x2gpu-25gbe"), rows).step_time
    assert (batch.step_time >= plain).all() and (batch.step_time > plain).mean() > 0.5


def test_copies_over_a_shared_bridge_queue_as_in_the_one_placement_pass():
    """On the paper's 4 K40s every copy crosses the one host bridge: a tensor read on three other
    GPUs goes out three times in turn, each copy waiting for the one before."""
    graph = fan_dag(40, seed=3)
    sim = simulator(graph, "paper-4xk40")
    rows = random_rows(sim, 200, seed=5)
    assert_one_at_a_time(sim, rows)
    # some row sends one tensor to several devices (the case where the copies' order matters)
    tables = sim.tables
    src = rows[:, tables.step_node][:, tables.t_producer]
    readers = rows[:, tables.e_consumer]
    remote = {(b, t, d) for b in range(len(rows)) for t, d in zip(tables.e_tensor, readers[b]) if d != src[b, t]}
    per_tensor = {}
    for b, t, _ in remote:
        per_tensor[(b, t)] = per_tensor.get((b, t), 0) + 1
    assert max(per_tensor.values()) >= 2


def test_tight_caps_fail_the_same_rows_whether_or_not_peaks_are_asked_for(graph):
    """Caps at the 90th percentile of each device's peaks: some rows run out of memory; the rows
    that do are the same as one at a time, with the peaks or without them."""
    loose = simulator(graph, "paper-4xk40")
    rows = random_rows(loose, 200, seed=2)
    peaks = simulate_batch(loose, rows).peak_memory
    tight = simulator(graph, "paper-4xk40", caps=[int(c) for c in np.quantile(peaks, 0.9, axis=0)])
    batch = assert_one_at_a_time(tight, rows)
    assert {OOM, None} <= set(batch.failure)
    assert_one_at_a_time(tight, rows, peaks=False)


def test_a_row_with_an_op_its_device_cannot_run_fails_as_invalid():
    graph = fan_dag(30, seed=6)
    graph.nodes[next(iter(graph.nodes))].device_kinds = frozenset({"cpu"})
    sim = simulator(graph, "cpu-fast-slow-gpu")
    batch = assert_one_at_a_time(sim, random_rows(sim, 60, seed=4))
    assert {INVALID, None} <= set(batch.failure)


@pytest.mark.parametrize("options", [{"training": TrainingSpec()},
                                     {"pipeline": Pipeline(3, "gpipe")},
                                     {"training": TrainingSpec(), "pipeline": Pipeline(2, "gpipe")},
                                     {"training": TrainingSpec(), "pipeline": Pipeline(2, "1f1b")}],
                         ids=["training", "gpipe-inference", "gpipe-training", "1f1b-training"])
def test_training_and_pipelined_steps_equal_the_one_placement_pass(options):
    """The training step (backward, updates, the updated weights sent to their other readers) and
    the pipelined steps batch the same way; 1F1B, whose order is each row's own, runs row by row."""
    graph = fan_dag(30, seed=2)
    sim = simulator(graph, "paper-4xk40", **options)
    assert_one_at_a_time(sim, random_rows(sim, 60, seed=6))


class HandOverCost(AnalyticCostModel):
    """cpu:0 and cpu:1 hand tensors over without a link (an empty route: the copy takes its time
    but occupies nothing, so it never waits); every other copy crosses a shared bus and its own link."""

    def route(self, src, dst):
        return () if {src, dst} == {"cpu:0", "cpu:1"} else ("bus", f"{src}->{dst}")


def test_copies_that_occupy_no_link_neither_wait_nor_hold_up_the_copies_over_links():
    """A copy with an empty route starts when its producer finishes, whatever the links carry, and
    holds up no other copy: as in the one-placement pass, in rows where it overlaps copies over the bus."""
    graph = fan_dag(40, seed=3)
    devices = ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    sim = Simulator(graph, devices, HandOverCost(devices))
    assert sim.pair_links[1] == () and sim.pair_links[2] != ()   # cpu:0 -> cpu:1 unlinked, cpu:0 -> cpu:2 linked
    rows = random_rows(sim, 150, seed=9)
    assert_one_at_a_time(sim, rows)
    assert_one_at_a_time(sim, rows, peaks=False)
    # only unlinked copies: no link at all is used, and the step is the devices' alone
    pair = np.random.default_rng(1).integers(0, 2, size=(40, len(sim.node_names)))
    assert_one_at_a_time(sim, pair)


def test_results_do_not_depend_on_the_chunking_or_on_which_sort_orders_the_memory_events(monkeypatch):
    graph = fan_dag(40, seed=4)
    rows = random_rows(simulator(graph, "2x2gpu-25gbe"), 50, seed=7)
    whole = simulate_batch(simulator(graph, "2x2gpu-25gbe"), rows)
    monkeypatch.setattr(batch_simulator, "MAX_ROWS", 7)
    monkeypatch.setattr(batch_simulator, "_KEY_LIMIT", 0)   # (device, time) never packed: two sorts
    sim = simulator(graph, "2x2gpu-25gbe")
    assert batch_simulator._plan(sim.tables).rows == 7
    split = assert_one_at_a_time(sim, rows)
    assert split.step_time.tolist() == whole.step_time.tolist()
    assert split.peak_memory.tolist() == whole.peak_memory.tolist()


def test_the_simulated_measurer_measures_a_batch_as_it_measures_each_placement():
    """`measure_many` (what the learner's measurement cache calls) gives `measure`'s measurements,
    failures and their reasons included."""
    graph = fan_dag(30, seed=5)
    cluster = load_cluster("paper-4xk40")
    devices = as_devices(cluster.device_specs())
    names = cluster.device_names
    loose = SimulatedMeasurer(graph, devices, RooflineCostModel(cluster, graph))
    rows = random_rows(loose.simulator, 40, seed=8)
    caps = np.quantile(simulate_batch(loose.simulator, rows).peak_memory, 0.9, axis=0)
    measurer = SimulatedMeasurer(graph, devices, RooflineCostModel(cluster, graph),
                                 mem_caps={d: int(c) for d, c in zip(names, caps)})
    placements = [Placement(names, {n: names[d] for n, d in zip(graph.nodes, row)}) for row in rows.tolist()]
    placements.append(Placement(names + ["cuda:9"], {n: "cuda:9" for n in graph.nodes}))   # an unknown device
    many = measurer.measure_many(placements)
    assert [m.to_dict() for m in many] == [measurer.measure(p).to_dict() for p in placements]
    assert {m.failure for m in many} >= {None, OOM, INVALID}
