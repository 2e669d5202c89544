import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper
from testgraphs import branches

sys.path.insert(0, str(Path(__file__).parents[1] / "placers"))
from placer_testkit import LinearCost, make_graph, random_dag  # noqa: E402

from placer.costmodel.lower_bound import lower_bound  # noqa: E402
from placer.costmodel.roofline import RooflineCostModel  # noqa: E402
from placer.costmodel.simulator import AnalyticCostModel, Simulator, simulate_batch  # noqa: E402
from placer.costmodel.training_costs import TrainingStepCosts  # noqa: E402
from placer.graph.load import load_graph  # noqa: E402
from placer.hardware import load_cluster  # noqa: E402
from placer.placers import PLACERS  # noqa: E402
from placer.program.training import TrainingSpec  # noqa: E402


def test_a_chain_cannot_beat_its_length_at_the_fastest_device():
    g = make_graph([("a", [], 1e9), ("b", ["a"], 2e9), ("c", ["b"], 3e9)])
    lb = lower_bound(g, ["slow", "fast"], LinearCost({"slow": 1e9, "fast": 2e9}))
    assert lb.critical_path == pytest.approx(3.0) and lb.value == pytest.approx(3.0)


def test_independent_work_is_bounded_by_its_share_on_equal_devices():
    g = make_graph([(f"n{i}", [], 1e9) for i in range(4)])
    lb = lower_bound(g, ["cpu:0", "cpu:1"], LinearCost({"cpu:0": 1e9, "cpu:1": 1e9}))
    assert lb.load == pytest.approx(2.0) and lb.critical_path == pytest.approx(1.0)
    assert lb.value == pytest.approx(2.0)


def test_the_lp_load_bound_accounts_for_a_slow_device_doing_less():
    g = make_graph([("a", [], 1e9), ("b", [], 1e9)])
    lb = lower_bound(g, ["fast", "slow"], LinearCost({"fast": 3e9, "slow": 1e9}))
    # fast takes 3/4 of the work: 0.75 * 2 nodes * 1/3 s = 0.5 s = 0.25 * 2 * 1 s on slow
    assert lb.load_method == "lp" and lb.load == pytest.approx(0.5)


def _random_dag(rng: np.random.Generator, n: int):
    spec = []
    for i in range(n):
        parents = sorted({f"n{j}" for j in rng.integers(0, i, size=min(i, 2))}) if i else []
        spec.append((f"n{i}", parents, float(rng.uniform(1e7, 1e9))))
    return make_graph(spec, numel=int(rng.integers(100, 100_000)))


def test_no_simulated_placement_beats_the_lower_bound():
    rng = np.random.default_rng(0)
    devices = ["cpu:0", "cpu:1", "cuda:0"]
    for _ in range(5):
        g = _random_dag(rng, 30)
        cost = AnalyticCostModel(devices)
        bound = lower_bound(g, devices, cost).value
        sim = Simulator(g, devices, cost)
        for _ in range(40):
            step = sim.simulate(rng.integers(0, len(devices), size=len(g.nodes)).tolist()).step_time
            assert step >= bound * (1 - 1e-9)


# --- transfers, shared devices and memory caps: every placement against the bound ------------------

CATALOGUE = ["paper-4xk40", "cpu-fast-slow-gpu", "v100-k40-mix", "4xa100-nvlink"]


def _every_placement_best(sim: Simulator, n_nodes: int) -> float:
    """The least simulated step over every placement that fits (brute force, in batches)."""
    every = np.asarray(list(itertools.product(range(len(sim.devices)), repeat=n_nodes)), dtype=np.int64)
    best = math.inf
    for k in range(0, len(every), 4096):
        result = simulate_batch(sim, every[k:k + 4096])
        ok = np.asarray([f is None for f in result.failure])
        best = min(best, float(result.step_time[ok].min(initial=math.inf)))
    return best


@pytest.mark.parametrize("training", [None, TrainingSpec()], ids=["inference", "training"])
@pytest.mark.parametrize("cluster, n, depth", [("paper-4xk40", 2, 1), ("cpu-fast-slow-gpu", 3, 1),
                                               ("paper-2xk40", 2, 2), ("4xa100-nvlink", 2, 1)])
def test_no_placement_at_all_beats_the_bound_on_a_catalogue_cluster(cluster, n, depth, training):
    graph = load_graph(branches(n, depth, width=256, batch=64))
    c = load_cluster(cluster)
    cost = RooflineCostModel(c, graph)
    bound = lower_bound(graph, c.device_names, cost, training)
    best = _every_placement_best(Simulator(graph, c.device_names, cost, training=training), len(graph.nodes))
    assert bound.transfer_path >= bound.critical_path
    assert bound.value <= best * (1 + 1e-9)


def _placements(graph, devices, cost, training, rng):
    """Random placements, every list heuristic, local search and the exact solver."""
    placer_cost = TrainingStepCosts(graph, devices, cost, training) if training is not None else cost
    found = [rng.integers(0, len(devices), size=len(graph.nodes)).tolist() for _ in range(60)]
    found += [[d] * len(graph.nodes) for d in range(len(devices))]
    options = {"local_search": {"samples": 100}, "exact": {"time_limit": 0.5, "work_limit": 0.5}}
    for name in ("heft", "m_etf", "m_sct", "metis", "expert", "local_search", "exact"):
        placement = PLACERS[name].place(graph, devices, placer_cost, None, seed=0, **options.get(name, {}))
        found.append([devices.index(placement.nodes[n]) for n in graph.nodes])
    return found


@pytest.mark.parametrize("training", [None, TrainingSpec()], ids=["inference", "training"])
@pytest.mark.parametrize("cluster", CATALOGUE)
def test_no_heuristic_random_or_exact_placement_beats_the_bound(cluster, training):
    rng = np.random.default_rng(1)
    c = load_cluster(cluster)
    for graph in (load_graph(branches(4, 2, width=256, batch=64)), random_dag(25, seed=3)):
        cost = RooflineCostModel(c, graph)
        bound = lower_bound(graph, c.device_names, cost, training).value
        sim = Simulator(graph, c.device_names, cost, training=training)
        for assign in _placements(graph, c.device_names, cost, training, rng):
            assert sim.simulate(assign).step_time >= bound * (1 - 1e-9)


def test_on_a_heterogeneous_cluster_the_transfers_make_the_bound_strictly_tighter():
    # four branches, two fast V100s: the old bound ran every branch at once on a V100 with free
    # copies; now a branch on another device pays its copies, and branches sharing one wait
    graph = load_graph(branches(4, 1, width=256, batch=64))
    c = load_cluster("v100-k40-mix")
    cost = RooflineCostModel(c, graph)
    bound = lower_bound(graph, c.device_names, cost)
    one_branch = sum(cost.op_time(graph.nodes[n], "cuda:0") for n in ("mm0_0", "relu0_0", "concat"))
    assert bound.critical_path == pytest.approx(one_branch)
    assert bound.value == bound.transfer_path > 1.2 * max(bound.critical_path, bound.load)
    best = min(Simulator(graph, c.device_names, cost).simulate(assign).step_time
               for assign in _placements(graph, c.device_names, cost, None, np.random.default_rng(0)))
    assert bound.value <= best


def test_where_the_fastest_device_changes_along_a_chain_the_bound_pays_the_copy_or_the_slower_device():
    # big nodes are fastest on the GPU, tiny ones on the CPU (a cheaper launch); a chain cannot
    # take both without copies, and on a chain the transfer path is the optimum itself
    g = make_graph([("big0", [], 1e9), ("tiny0", ["big0"], 0.0), ("big1", ["tiny0"], 1e9), ("tiny1", ["big1"], 0.0)],
                   numel=1000)
    devices = ["cpu:0", "cuda:0"]
    cost = AnalyticCostModel(devices)
    assert cost.op_time(g.nodes["tiny0"], "cpu:0") < cost.op_time(g.nodes["tiny0"], "cuda:0")
    bound = lower_bound(g, devices, cost)
    best = _every_placement_best(Simulator(g, devices, cost), len(g.nodes))
    assert bound.critical_path < bound.transfer_path == pytest.approx(best, rel=1e-12)


class UnlinkedCost(LinearCost):
    """Copies that occupy no link (an empty route): they overlap, so the bound may not add them up."""

    def route(self, src, dst):
        return ()


def _split_join():
    """x -> Split -> (a, b) -> Add: one producer sends two tensors to one consumer."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="head"),
             helper.make_node("Split", ["r"], ["a", "b"], name="split", axis=0, num_outputs=2),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    g = helper.make_graph(nodes, "split_join", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 512])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 512])])
    return load_graph(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))


@pytest.mark.parametrize("cost_type", [LinearCost, UnlinkedCost])
def test_two_tensors_of_one_producer_queue_on_a_link_and_overlap_without_one(cost_type):
    graph = _split_join()
    devices = ["cpu:0", "cpu:1"]
    cost = cost_type({"cpu:0": 1e9, "cpu:1": 1e9}, latency=1e-3, bandwidth=1e8,
                     unsupported={"head": {"cpu:1"}, "split": {"cpu:1"}, "add": {"cpu:0"}})
    bound = lower_bound(graph, devices, cost)
    sim = Simulator(graph, devices, cost)
    best = min(sim.simulate(assign).step_time for assign in itertools.product(range(2), repeat=len(graph.nodes)))
    half = graph.tensors["a"].nbytes
    # both halves cross: on a link one after the other, without one side by side
    copies = 2 * (1e-3 + half / 1e8) if cost_type is LinearCost else 1e-3 + half / 1e8
    assert bound.transfer_path == pytest.approx(best) and best == pytest.approx(
        sum(cost.op_time(n, d) for n, d in zip(graph.nodes.values(), ["cpu:0", "cpu:0", "cpu:1"])) + copies)


def test_memory_caps_tighten_the_load_bound_and_no_placement_that_fits_beats_it():
    # four independent nodes with 100 kB of weights each; the fast device holds one and a half
    g = make_graph([(f"n{i}", [], 1e9) for i in range(4)], numel=1, params={f"n{i}": 100_000 for i in range(4)})
    devices = ["cuda:0", "cpu:0"]
    cost = LinearCost({"cuda:0": 4e9, "cpu:0": 1e9})
    caps = {"cuda:0": 150_000}
    free, capped = lower_bound(g, devices, cost), lower_bound(g, devices, cost, caps=caps)
    assert free.load == pytest.approx(0.8) and not free.caps_used
    # at most 1.5 nodes' weights on cuda:0 (less the graph input's 4 bytes), the rest on cpu:0
    assert capped.load == pytest.approx(2.5, rel=1e-4) and capped.caps_used
    sim = Simulator(g, devices, cost, [caps.get(d) for d in devices])
    best = _every_placement_best(sim, len(g.nodes))
    assert best == pytest.approx(3.0) and best >= capped.value
    # each node fits somewhere, all four nowhere: no placement fits, and the bound ignores the caps
    crowded = lower_bound(g, devices, cost, caps={"cuda:0": 150_000, "cpu:0": 150_000})
    assert crowded.load == pytest.approx(free.load) and not crowded.caps_used


def test_a_node_whose_weights_fit_no_fast_device_runs_on_a_slow_one_in_the_bound():
    g = make_graph([("a", [], 1e9), ("b", ["a"], 1e9)], numel=1, params={"b": 400_000})
    devices = ["cuda:0", "cpu:0"]
    cost = LinearCost({"cuda:0": 10e9, "cpu:0": 1e9}, latency=0.0)
    capped = lower_bound(g, devices, cost, caps={"cuda:0": 300_000})
    assert lower_bound(g, devices, cost).value == pytest.approx(0.2)
    assert capped.critical_path == pytest.approx(1.1) and capped.value >= 1.1
    # caps no placement can meet are ignored, not turned into a bound no placement reaches
    none_fit = lower_bound(g, devices, cost, caps={"cuda:0": 1, "cpu:0": 1})
    assert none_fit.value == pytest.approx(0.2) and not none_fit.caps_used


def test_one_nodes_training_steps_share_its_device_in_the_transfer_path():
    # cpu:0 computes fast, cpu:1 moves memory fast: each forward and backward is fastest on cpu:0,
    # each update (passes over the weights) on cpu:1, but an update runs where its node's backward does
    g = make_graph([("a", [], 1e10), ("b", ["a"], 1e10)], numel=1000, params={"a": 4_000_000, "b": 4_000_000})
    devices = ["cpu:0", "cpu:1"]
    cost = AnalyticCostModel(devices, speeds={"cpu:0": 1e10, "cpu:1": 1e9},
                             mem_bandwidths={"cpu:0": 1e9, "cpu:1": 1e11})
    bound = lower_bound(g, devices, cost, TrainingSpec())
    best = _every_placement_best(Simulator(g, devices, cost, training=TrainingSpec()), len(g.nodes))
    assert bound.critical_path < bound.transfer_path <= best * (1 + 1e-9)
    update = cost.training_step_time("update:a_w", "update", g.nodes["a"], 4_000_000, "cpu:0")
    assert bound.transfer_path >= bound.critical_path + update * (1 - 1e-9) - cost.training_step_time(
        "update:a_w", "update", g.nodes["a"], 4_000_000, "cpu:1")


def test_compare_sets_every_row_against_the_bound_with_transfers_and_caps():
    from placer.costmodel.roofline import cluster_measurer
    from placer.evaluate.compare import baseline_rows, compare
    from placer.evaluate.report import format_table

    graph = load_graph(branches(4, 1, width=256, batch=64))
    c = load_cluster("v100-k40-mix")
    cost = RooflineCostModel(c, graph)
    caps = {d.name: d.model.memory_bytes for d in c.devices}
    rows = baseline_rows(graph, c.device_names, cost, caps, ["single", "heft", "m_etf", "exact"],
                         options={"exact": {"time_limit": 0.5, "work_limit": 0.5}})
    comparison = compare(graph, c.device_names, cluster_measurer(c, graph, cost), cost, rows, caps)
    bound = comparison.lower_bound
    assert bound.caps_used and bound.value == bound.transfer_path > max(bound.critical_path, bound.load)
    assert all(r.ratio_to_lower_bound >= 1.0 for r in comparison.rows) and len(comparison.rows) == 8
    table = format_table(comparison)
    assert f"with transfers {bound.transfer_path * 1e3:.2f} ms" in table
    assert comparison.to_dict()["lower_bound"]["transfer_path"] == bound.transfer_path
