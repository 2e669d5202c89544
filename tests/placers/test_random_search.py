import importlib

import numpy as np
import pytest
from placer_testkit import LinearCost, make_graph, random_dag

from placer.errors import PlacerError
from placer.graph.grouping import group_graph
from placer.costmodel.simulator import AnalyticCostModel, Simulator, simulate_batch
from placer.placers import random_search, random_search_curve, single_device
from placer.placers.base import executor_peak_memory

DEVICES = ["cpu:0", "cpu:1"]


@pytest.fixture
def dag():
    return random_dag(30, seed=3)


@pytest.fixture
def branches():
    """src -> eight independent two-node branches -> join: worth spreading over both devices."""
    spec = [("src", [], 1e7)]
    for b in range(8):
        spec += [(f"b{b}a", ["src"], 1e9), (f"b{b}b", [f"b{b}a"], 1e9)]
    return make_graph(spec + [("join", [f"b{b}b" for b in range(8)], 1e7)], numel=1000)


def _step(graph, cost, placement):
    return Simulator(graph, DEVICES, cost).simulate([DEVICES.index(placement.nodes[n]) for n in graph.nodes]).step_time


def test_random_search_is_reproducible_from_its_seed(dag):
    cost = AnalyticCostModel(DEVICES)
    a = random_search(dag, DEVICES, cost, seed=5, samples=64)
    assert a.nodes == random_search(dag, DEVICES, cost, seed=5, samples=64).nodes
    assert a.nodes != random_search(dag, DEVICES, cost, seed=6, samples=64).nodes
    info = a.extra["placer"]
    assert info["name"] == "random_search" and info["samples"] == 64 and info["seed"] == 5
    assert info["simulated_step_time"] == pytest.approx(_step(dag, cost, a))


def test_more_samples_never_find_a_slower_placement(dag):
    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 1e9, "cpu:1": 1e9})
    curve = random_search_curve(dag, DEVICES, cost, seed=1, counts=[1, 10, 100, 600])
    times = list(curve.values())
    assert all(later <= earlier for earlier, later in zip(times, times[1:])) and times[-1] < times[0]
    # The curve's point at N is what random_search finds with N samples: the first N of one stream.
    found = random_search(dag, DEVICES, cost, seed=1, samples=100).extra["placer"]["simulated_step_time"]
    assert found == pytest.approx(curve[100])


def test_random_search_beats_the_median_random_placement_on_parallel_branches(branches):
    cost = LinearCost({"cpu:0": 1e9, "cpu:1": 1e9}, latency=1e-4, bandwidth=1e9)
    grouping = group_graph(branches, n_devices=2)
    draws = np.random.default_rng(99).integers(0, 2, size=(500, len(grouping)))
    assign = np.array([grouping.node_assignment(row, list(branches.nodes)) for row in draws])
    median = float(np.median(simulate_batch(Simulator(branches, DEVICES, cost), assign).step_time))
    best = random_search(branches, DEVICES, cost, samples=200)
    assert _step(branches, cost, best) < 0.95 * median
    assert _step(branches, cost, best) < 16.0 * 0.75   # well under one device doing all 16 s of work


def test_random_search_never_returns_a_placement_over_the_caps(dag):
    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 4e9, "cpu:1": 1e9})
    fastest = random_search(dag, DEVICES, cost, samples=300)
    caps = {"cpu:0": executor_peak_memory(dag, single_device(dag, DEVICES))["cpu:0"] // 2}
    assert executor_peak_memory(dag, fastest)["cpu:0"] > caps["cpu:0"]   # the caps bite
    p = random_search(dag, DEVICES, cost, caps, samples=300)
    assert executor_peak_memory(dag, p)["cpu:0"] <= caps["cpu:0"]
    sim = Simulator(dag, DEVICES, cost, [caps["cpu:0"], None])
    assert sim.simulate([DEVICES.index(p.nodes[n]) for n in dag.nodes]).failure is None


def test_the_executors_memory_check_has_the_last_word(dag, monkeypatch):
    """A placement the simulator fits but the executor would refuse before running never wins."""
    module = importlib.import_module("placer.placers.random_search")   # the package exports the function
    cost = AnalyticCostModel(DEVICES)
    caps = {"cpu:0": 10**9}
    fastest = random_search(dag, DEVICES, cost, caps, samples=100)
    monkeypatch.setattr(module, "over_caps", lambda graph, p, caps, training=None: ["cpu:0"] if p.nodes == fastest.nodes else [])
    second = random_search(dag, DEVICES, cost, caps, samples=100)
    assert second.nodes != fastest.nodes
    assert second.extra["placer"]["simulated_step_time"] >= fastest.extra["placer"]["simulated_step_time"]


def test_random_search_refuses_when_no_sample_fits_the_caps(dag):
    with pytest.raises(PlacerError, match="none of 50 random placements fits.*mem="):
        random_search(dag, DEVICES, AnalyticCostModel(DEVICES), {"cpu:0": 50_000, "cpu:1": 50_000}, samples=50)
    with pytest.raises(PlacerError, match="at least 1 sample"):
        random_search(dag, DEVICES, AnalyticCostModel(DEVICES), samples=0)
