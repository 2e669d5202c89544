import pytest
from placer_testkit import random_dag

from placer.errors import PlacerError
from placer.costmodel.lower_bound import lower_bound
from placer.costmodel.simulator import AnalyticCostModel, Simulator
from placer.placers import PLACERS, book_peak_memory
from placer.placers.base import executor_peak_memory

DEVICES = ["cpu:0", "cpu:1"]


@pytest.fixture
def dag():
    return random_dag(40, seed=1)


@pytest.mark.parametrize("name", sorted(PLACERS))
def test_every_placer_places_every_node_on_a_listed_device_no_faster_than_the_bound(name, dag):
    cost = AnalyticCostModel(DEVICES)
    p = PLACERS[name].place(dag, DEVICES, cost, None, seed=0)
    assert set(p.nodes) == set(dag.nodes) and set(p.nodes.values()) <= set(DEVICES)
    assert p.graph_sha256 == dag.sha256 and p.extra["placer"]["name"] == name
    step = Simulator(dag, DEVICES, cost).simulate([DEVICES.index(p.nodes[n]) for n in dag.nodes]).step_time
    assert step >= lower_bound(dag, DEVICES, cost).value * (1 - 1e-9)


@pytest.mark.parametrize("name", sorted(n for n, s in PLACERS.items() if s.respects_memory))
def test_placers_that_respect_caps_refuse_a_graph_that_cannot_fit(name, dag):
    with pytest.raises(PlacerError, match="mem="):
        PLACERS[name].place(dag, DEVICES, AnalyticCostModel(DEVICES), {"cpu:0": 50_000, "cpu:1": 50_000})


def test_the_list_schedulers_beat_random_placement_in_the_simulator(dag):
    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 1e9, "cpu:1": 1e9})
    sim = Simulator(dag, DEVICES, cost)

    def step(name):
        p = PLACERS[name].place(dag, DEVICES, cost, None, seed=0)
        return sim.simulate([DEVICES.index(p.nodes[n]) for n in dag.nodes]).step_time

    for name in ("m_etf", "m_sct", "heft"):
        assert step(name) < step("random")


@pytest.mark.parametrize("name", sorted(n for n, s in PLACERS.items() if s.respects_memory))
def test_a_placement_within_the_caps_passes_the_executors_memory_check(name, dag):
    cost = AnalyticCostModel(DEVICES)
    single = PLACERS["single"].place(dag, DEVICES, cost, None)
    caps = {"cpu:0": int(executor_peak_memory(dag, single)["cpu:0"] * 0.6)}
    p = PLACERS[name].place(dag, DEVICES, cost, caps)
    assert p.nodes != single.nodes
    assert executor_peak_memory(dag, p)["cpu:0"] <= caps["cpu:0"]


def test_the_memory_book_never_counts_less_than_the_executor_in_topological_order(dag):
    for seed in range(5):
        p = PLACERS["random"].place(dag, DEVICES, None, None, seed=seed)
        book, executor = book_peak_memory(dag, p), executor_peak_memory(dag, p)
        assert all(book[d] >= executor[d] for d in DEVICES)
