"""Local search: never worse than its start, finds what the list heuristics miss, respects the
caps and spends no more simulated placements than its budget."""

import importlib
import itertools

import numpy as np
import pytest
from placer_testkit import LinearCost, make_graph, random_dag

from placer.costmodel.simulator import AnalyticCostModel, SimulatedMeasurer, Simulator
from placer.costmodel.training_costs import TrainingStepCosts
from placer.evaluate.compare import baseline_rows, compare
from placer.placers import PLACERS, local_search, single_device
from placer.placers.base import executor_peak_memory
from placer.placers.starts import best_start
from placer.program.training import TrainingSpec

DEVICES = ["cpu:0", "cpu:1"]


@pytest.fixture
def two_branches():
    """src -> a heavy chain (h1, h2) and a light one (l1, l2) -> join. On a fast and a slow device
    every list heuristic keeps everything on the fast one; the best placement runs l1 on the slow
    device while the fast one runs the heavy chain."""
    return make_graph([("src", [], 1e8), ("h1", ["src"], 2e9), ("h2", ["h1"], 2e9), ("l1", ["src"], 1e9),
                       ("l2", ["l1"], 1e9), ("join", ["h2", "l2"], 1e8)], numel=1000)


@pytest.fixture
def fast_slow():
    return LinearCost({"cpu:0": 3e9, "cpu:1": 1e9}, latency=1e-3, bandwidth=1e9)


def step_of(graph, cost, placement, caps=None, training=None):
    sim = Simulator(graph, DEVICES, cost, [(caps or {}).get(d) for d in DEVICES], training=training)
    return sim.simulate([DEVICES.index(placement.nodes[n]) for n in graph.nodes])


def test_local_search_finds_the_placement_the_list_heuristics_miss(two_branches, fast_slow):
    sim = Simulator(two_branches, DEVICES, fast_slow)
    optimum = min(sim.simulate(a).step_time for a in itertools.product(range(2), repeat=len(two_branches.nodes)))
    starts = {name: step_of(two_branches, fast_slow, PLACERS[name].place(two_branches, DEVICES, fast_slow)).step_time
              for name in ("m_etf", "m_sct", "heft")}
    assert min(starts.values()) > optimum * 1.15   # every list heuristic is fooled
    p = local_search(two_branches, DEVICES, fast_slow)
    info = p.extra["placer"]
    assert info["start_step_time"] == pytest.approx(min(min(starts.values()), sim.simulate([0] * 6).step_time))
    assert info["simulated_step_time"] == pytest.approx(optimum) == step_of(two_branches, fast_slow, p).step_time
    assert p.nodes["l1"] == "cpu:1" and p.nodes["h1"] == p.nodes["h2"] == "cpu:0"
    assert info["local_optimum"] and info["simulated"] < info["samples"]


def test_node_moves_go_on_where_group_moves_stop(two_branches, fast_slow):
    """With one group, a group move is a single-device placement: only node moves reach the optimum."""
    p = local_search(two_branches, DEVICES, fast_slow, groups=1)
    info = p.extra["placer"]
    assert info["groups"] == 1 and info["group_moves"] == 0 and info["node_moves"] >= 1
    assert p.nodes["l1"] == "cpu:1" and info["simulated_step_time"] < info["start_step_time"] / 1.15


def test_local_search_starts_from_the_exact_solver_where_it_beats_every_heuristic():
    """On this DAG the solver's placement simulates 0.92 s where the best heuristic's takes 1.39 and
    local search from the heuristics stops at a local optimum of 1.07: started from the solver's
    placement, local search is never slower than the exact baseline."""
    dag = random_dag(12, seed=8)
    trio = ["cpu:0", "cuda:0", "cuda:1"]
    cost = LinearCost({"cpu:0": 1e9, "cuda:0": 4e9, "cuda:1": 2e9}, latency=1e-3, bandwidth=1e9)
    solved = PLACERS["exact"].place(dag, trio, cost).extra["placer"]["simulated_step_time"]
    found = local_search(dag, trio, cost, samples=200).extra["placer"]
    assert found["start"] == "exact" and found["candidates"]["exact"] == pytest.approx(solved)
    assert found["simulated_step_time"] <= solved
    heuristics_only = local_search(dag, trio, cost, samples=200, exact_start=False).extra["placer"]
    assert "exact" not in heuristics_only["candidates"] and heuristics_only["local_optimum"]
    assert heuristics_only["simulated_step_time"] > solved * 1.1


def test_the_solvers_placement_costs_one_sample_and_only_where_the_budget_has_one_left():
    dag = random_dag(12, seed=8)
    trio = ["cpu:0", "cuda:0", "cuda:1"]
    cost = LinearCost({"cpu:0": 1e9, "cuda:0": 4e9, "cuda:1": 2e9}, latency=1e-3, bandwidth=1e9)
    starts = best_start(dag, trio, cost, None, Simulator(dag, trio, cost)).simulated   # the distinct heuristics'
    full = local_search(dag, trio, cost, samples=starts).extra["placer"]
    assert "exact" not in full["candidates"] and full["simulated"] == starts
    one_more = local_search(dag, trio, cost, samples=starts + 1).extra["placer"]
    assert one_more["start"] == "exact" and one_more["simulated"] == starts + 1
    assert one_more["exact_start"]["used"] == "solver"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_local_search_is_never_worse_than_its_start_and_reproducible(seed):
    dag = random_dag(30, seed=seed)
    cost = AnalyticCostModel(DEVICES + ["cuda:0"], speeds={"cpu:1": 5e9})
    devices = DEVICES + ["cuda:0"]
    p = local_search(dag, devices, cost, seed=seed, samples=300)
    info = p.extra["placer"]
    sim = Simulator(dag, devices, cost)
    step = sim.simulate([devices.index(p.nodes[n]) for n in dag.nodes]).step_time
    assert step == pytest.approx(info["simulated_step_time"])
    assert step <= info["start_step_time"] == min(t for t in info["candidates"].values() if t is not None)
    for kept in ("placer.placers.starts", "placer.placers.exact"):   # the second run starts and solves afresh
        module = importlib.import_module(kept)
        (module._last_start if hasattr(module, "_last_start") else module._last_solve).clear()
    assert p.nodes == local_search(dag, devices, cost, seed=seed, samples=300).nodes


def test_local_search_spends_at_most_its_budget(monkeypatch):
    dag = random_dag(120, seed=4)   # large enough that 150 samples of moves reach no local optimum
    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 2e9, "cpu:1": 1e9})
    counted = []
    for name in ("placer.placers.local_search", "placer.placers.starts"):   # the moves, the starts
        module = importlib.import_module(name)   # the package exports the function local_search
        real = module.simulate_batch
        monkeypatch.setattr(module, "simulate_batch",
                            lambda sim, assign, real=real, **kw: counted.append(len(assign)) or real(sim, assign, **kw))
    for samples in (1, 5, 37, 150):
        counted.clear()
        importlib.import_module("placer.placers.starts")._last_start.clear()   # each run scores its start itself
        p = local_search(dag, DEVICES, cost, samples=samples)
        assert sum(counted) == p.extra["placer"]["simulated"] <= samples
        assert not p.extra["placer"]["local_optimum"]
    assert sum(counted) == 150   # the whole budget went on moves


def test_on_a_large_graph_moves_are_simulated_in_larger_batches(monkeypatch):
    """From `LARGE_GRAPH` nodes a batch holds `LARGE_CHUNK` moves (on 10,000 nodes a batch's cost is
    its walk, whatever its rows), below it `CHUNK`; the budget holds either way."""
    module = importlib.import_module("placer.placers.local_search")
    dag = random_dag(120, seed=4)
    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 2e9, "cpu:1": 1e9})
    batches = []
    real = module.simulate_batch
    monkeypatch.setattr(module, "simulate_batch",
                        lambda sim, assign, **kw: batches.append(len(assign)) or real(sim, assign, **kw))
    small = local_search(dag, DEVICES, cost, samples=150)
    assert max(batches) == module.CHUNK
    batches.clear()
    monkeypatch.setattr(module, "LARGE_GRAPH", len(dag.nodes))
    large = local_search(dag, DEVICES, cost, samples=150)
    assert max(batches) == module.LARGE_CHUNK
    assert large.extra["placer"]["simulated"] <= 150
    assert large.extra["placer"]["simulated_step_time"] <= large.extra["placer"]["start_step_time"]
    assert small.extra["placer"]["start_step_time"] == large.extra["placer"]["start_step_time"]


def test_the_same_start_asked_twice_in_a_row_is_placed_and_scored_once(monkeypatch):
    """Local search's start and then the exact row's (a comparison): the heuristics place and the
    simulator scores once; a smaller limit, another cost model or a given placement start afresh,
    and a start served again is the caller's own (changing it changes no later one)."""
    starts = importlib.import_module("placer.placers.starts")
    placed = []
    monkeypatch.setattr(starts, "START_PLACERS", {name: (lambda *a, place=place, name=name, **kw: placed.append(name)
                                                         or place(*a, **kw))
                                                  for name, place in starts.START_PLACERS.items()})
    dag = random_dag(40, seed=3)
    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 2e9, "cpu:1": 1e9})
    sim = Simulator(dag, DEVICES, cost)
    first = best_start(dag, DEVICES, cost, None, sim, limit=1000)
    first.candidates["exact"] = 1.0   # as local search adds its solver's
    again = best_start(dag, DEVICES, cost, None, sim)
    assert len(placed) == len(starts.START_PLACERS)
    assert (again.name, again.step_time, again.simulated) == (first.name, first.step_time, first.simulated)
    assert again.assign.tolist() == first.assign.tolist() and "exact" not in again.candidates
    again.candidates["exact"], again.assign[:] = 1.0, 1 - again.assign   # a caller changing the one it got
    third = best_start(dag, DEVICES, cost, None, sim)
    assert third.assign.tolist() == first.assign.tolist() and "exact" not in third.candidates
    assert len(placed) == len(starts.START_PLACERS)
    best_start(dag, DEVICES, cost, None, sim, limit=first.simulated - 1)
    assert len(placed) == 2 * len(starts.START_PLACERS)
    best_start(dag, DEVICES, AnalyticCostModel(DEVICES, speeds={"cpu:0": 2e9, "cpu:1": 1e9}), None, sim)
    assert len(placed) == 3 * len(starts.START_PLACERS)
    given = best_start(dag, DEVICES, cost, None, sim, given=single_device(dag, DEVICES))
    assert given.name == "given" and given.simulated == 1


def test_local_search_respects_the_caps():
    dag = random_dag(30, seed=5)
    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 4e9, "cpu:1": 1e9})
    free = local_search(dag, DEVICES, cost, samples=400)
    caps = {"cpu:0": executor_peak_memory(dag, single_device(dag, DEVICES))["cpu:0"] // 2}
    assert executor_peak_memory(dag, free)["cpu:0"] > caps["cpu:0"]   # the caps bite
    p = local_search(dag, DEVICES, cost, caps, samples=400)
    assert executor_peak_memory(dag, p)["cpu:0"] <= caps["cpu:0"]
    assert step_of(dag, cost, p, caps).failure is None
    assert p.extra["placer"]["simulated_step_time"] >= free.extra["placer"]["simulated_step_time"]


def test_the_executors_memory_check_has_the_last_word(monkeypatch):
    """A move the simulator fits but the executor would refuse before running is never taken."""
    dag = random_dag(20, seed=7)
    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 4e9, "cpu:1": 1e9})
    refused = lambda graph, placement, caps, training=None: "cpu:0" in placement.nodes.values()  # noqa: E731
    for name in ("placer.placers.local_search", "placer.placers.starts"):   # the moves, the starts
        monkeypatch.setattr(importlib.import_module(name), "over_caps", refused)
    p = local_search(dag, DEVICES, cost, {"cpu:0": 10**9}, samples=200)
    assert set(p.nodes.values()) == {"cpu:1"} and p.extra["placer"]["start"] == "single:cpu:1"


def test_local_search_scores_moves_on_the_simulated_training_step(ladder):
    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 1e9, "cpu:1": 1e9})
    training = TrainingSpec()
    p = local_search(ladder, DEVICES, TrainingStepCosts(ladder, DEVICES, cost, training), samples=200)
    info = p.extra["placer"]
    assert info["simulated_step_time"] == pytest.approx(step_of(ladder, cost, p, training=training).step_time,
                                                        rel=1e-12)
    assert info["simulated_step_time"] <= info["start_step_time"]
    assert info["simulated_step_time"] != pytest.approx(step_of(ladder, cost, p).step_time)   # not the forward pass


def test_compare_runs_the_new_placers_in_the_simulator_with_random_searchs_budget():
    dag = random_dag(25, seed=6)
    devices = ["cpu:0", "cuda:0", "cuda:1"]
    cost = AnalyticCostModel(devices, speeds={"cuda:1": 2e13})
    assert {"local_search", "exact", "expert"} <= set(PLACERS)
    rows = baseline_rows(dag, devices, cost, {}, ["single", "local_search", "exact", "expert", "random_search"],
                         options={"random_search": {"samples": 60}, "exact": {"time_limit": 2.0}})
    result = compare(dag, devices, SimulatedMeasurer(dag, devices, cost), cost, rows)
    named = {r.name: r for r in result.rows}
    for name in ("local_search", "exact", "expert"):
        row = named[name]
        assert row.status == "ok" and row.step_time == pytest.approx(row.predicted_step_time)
        assert row.step_time <= named["single:cpu:0"].step_time
    assert named["local_search"].placement.extra["placer"]["samples"] == 60   # the learner's budget
    assert named["exact"].placement.extra["placer"]["simulated_step_time"] == pytest.approx(named["exact"].step_time)
    assert named["local_search"].step_time <= min(named[f"single:{d}"].step_time for d in devices)
    assert named["expert"].placement.extra["placer"]["device"] == "cuda:1"   # a DAG of no RNN: the fastest device


@pytest.mark.parametrize("samples", [7, 40, 400])
def test_improve_moves_a_given_assignment_on_the_callers_groups_within_its_samples(two_branches, fast_slow,
                                                                                   monkeypatch, samples):
    """`improve` (the fine-tune's polish): from everything on the slow device, over the caller's
    groups and then single nodes, never more placements than asked, each one counted, every move
    on its curve at the placement count it was found, and the curve's last step time its result."""
    module = importlib.import_module("placer.placers.local_search")
    counted, real = [], module.simulate_batch
    monkeypatch.setattr(module, "simulate_batch",
                        lambda sim, assign, **kw: counted.append(len(assign)) or real(sim, assign, **kw))
    sim = Simulator(two_branches, DEVICES, fast_slow)
    start = np.ones(len(two_branches.nodes), dtype=np.int64)          # all on the slow cpu:1
    groups = [np.asarray([0, 1, 2]), np.asarray([3, 4, 5])]            # src+heavy chain, light chain+join
    found = module.improve(two_branches, DEVICES, sim, None, start, sim.simulate(start).step_time, samples, groups)
    assert sum(counted) == found.simulated <= samples
    assert found.step_time == pytest.approx(sim.simulate(found.assign).step_time)
    assert [s for s, _ in found.curve] == sorted(s for s, _ in found.curve) and found.curve[-1][0] <= found.simulated
    assert found.curve[-1][1] == found.step_time < sim.simulate(start).step_time
    assert found.group_moves >= 1 and found.group_moves + found.node_moves == len(found.curve)
    if samples == 400:   # room to finish: the optimum, where l1 alone runs on the slow device
        optimum = min(sim.simulate(a).step_time for a in itertools.product(range(2), repeat=6))
        assert found.local_optimum and found.step_time == pytest.approx(optimum)


@pytest.mark.parametrize("cut_at", [1, 7, 30])
def test_a_search_cut_by_ctrl_c_resumes_to_the_placement_an_uncut_one_gives(fast_slow, monkeypatch, cut_at):
    """Ctrl-C during the moves (the `cut_at`-th batch simulated, in the group or the node scan)
    hands back the search's state, and `resume` goes on to exactly the uncut run's placement."""
    module = importlib.import_module("placer.placers.local_search")   # the package exports the function

    dag = random_dag(40, seed=3)
    uncut = local_search(dag, DEVICES, fast_slow, samples=300)
    whole, calls = module.simulate_batch, []

    def cut(*args, **kwargs):
        calls.append(1)
        if len(calls) == cut_at:
            raise KeyboardInterrupt
        return whole(*args, **kwargs)

    monkeypatch.setattr(module, "simulate_batch", cut)
    with pytest.raises(module.SearchInterrupted) as interrupted:
        local_search(dag, DEVICES, fast_slow, samples=300)
    monkeypatch.setattr(module, "simulate_batch", whole)
    resumed = local_search(dag, DEVICES, fast_slow, samples=300, resume=interrupted.value.state)
    assert resumed.nodes == uncut.nodes
    assert resumed.extra["placer"] == uncut.extra["placer"]
    assert interrupted.value.state["search"]["spent"] < uncut.extra["placer"]["simulated"]
