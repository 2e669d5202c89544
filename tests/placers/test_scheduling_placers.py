import pytest
from placer_testkit import LinearCost, make_graph

from placer.errors import PlacerError
from placer.placers import heft, m_etf, m_sct
from placer.placers.m_sct import favourite_children
from placer.placers.scheduling import ScheduleState


@pytest.mark.parametrize("place", [m_etf, m_sct, heft])
def test_a_chain_stays_on_its_fastest_device(place, chain):
    cost = LinearCost({"slow": 1e9, "fast": 2e9}, latency=1e-3, bandwidth=1e9)
    p = place(chain, ["slow", "fast"], cost)
    assert set(p.nodes.values()) == {"fast"}
    assert p.extra["placer"]["predicted_makespan"] == pytest.approx(5 * 0.5)


def test_m_etf_on_a_chain_of_equal_devices_never_pays_a_transfer(chain, cost2):
    p = m_etf(chain, ["cpu:0", "cpu:1"], cost2)
    assert len(set(p.nodes.values())) == 1
    assert p.extra["placer"]["predicted_makespan"] == pytest.approx(5.0)


@pytest.mark.parametrize("place", [heft, m_etf, m_sct])
def test_fork_join_branches_run_in_parallel_when_transfers_are_cheap(place, fork_join, cost2):
    p = place(fork_join, ["cpu:0", "cpu:1"], cost2)
    assert p.nodes["left"] != p.nodes["right"]
    # src 0.1 s, the branches 4 s side by side, one 4 kB transfer (1.004 ms), join 0.1 s
    assert p.extra["placer"]["predicted_makespan"] == pytest.approx(0.1 + 4 + 1e-3 + 4e-6 + 0.1)


@pytest.mark.parametrize("place", [heft, m_etf, m_sct])
def test_fork_join_stays_on_one_device_when_transfers_cost_more_than_the_branches(place, fork_join):
    cost = LinearCost({"cpu:0": 1e9, "cpu:1": 1e9}, latency=10.0, bandwidth=1e9)
    p = place(fork_join, ["cpu:0", "cpu:1"], cost)
    assert len(set(p.nodes.values())) == 1


def test_m_sct_favours_the_child_with_the_costliest_transfer(cost2):
    g = make_graph([("a", [], 1.0), ("small", ["a"], 1.0), ("big", ["a"], 1.0)], numel=10)
    g.dag.edges["a", "big"]["bytes"] = 10**6
    assert favourite_children(ScheduleState(g, ["cpu:0", "cpu:1"], cost2, None))["a"] == "big"


@pytest.mark.parametrize("place", [heft, m_etf, m_sct])
def test_list_schedulers_avoid_devices_that_cannot_run_a_node(place, fork_join):
    cost = LinearCost({"cpu:0": 1e9, "cuda:0": 1e10}, unsupported={"left": {"cuda:0"}})
    p = place(fork_join, ["cpu:0", "cuda:0"], cost)
    assert p.nodes["left"] == "cpu:0"


@pytest.mark.parametrize("place", [heft, m_etf, m_sct])
def test_list_schedulers_keep_within_memory_caps(place):
    names = [f"n{i}" for i in range(6)]
    g = make_graph([(n, [], 1e9) for n in names], numel=1000, params={n: 6000 for n in names})
    cost = LinearCost({"cpu:0": 1e10, "cpu:1": 1e9})
    # 10 kB of weights and output each, plus one 4 kB copy of the graph input per device:
    # the fast device fits two nodes.
    p = place(g, ["cpu:0", "cpu:1"], cost, {"cpu:0": 24_000})
    assert sum(d == "cpu:0" for d in p.nodes.values()) == 2
    with pytest.raises(PlacerError):
        place(g, ["cpu:0", "cpu:1"], cost, {"cpu:0": 24_000, "cpu:1": 24_000})


@pytest.mark.parametrize("place", [m_etf, m_sct, heft])
def test_list_schedulers_need_a_cost_model(place, chain):
    with pytest.raises(PlacerError, match="cost model"):
        place(chain, ["cpu:0", "cpu:1"], None)


def test_the_insertion_start_is_the_first_gap_after_ready_time_on_any_timeline(chain, cost2):
    """HEFT fills idle gaps: the scan that starts past the intervals ending by the ready time (made
    for 10,000-node graphs) finds the start the whole scan finds, zero-length nodes included."""
    import random

    def whole_scan(busy, ready, length):
        t = ready
        for begin, end in busy:
            if t + length <= begin:
                return t
            t = max(t, end)
        return t

    state = ScheduleState(chain, ["cpu:0", "cpu:1"], cost2, None)
    node = next(iter(chain.nodes))
    rng = random.Random(0)
    for _ in range(300):
        state.busy["cpu:0"] = []
        t = 0.0
        for _ in range(rng.randint(0, 8)):   # disjoint intervals, some of zero length, some touching
            t += rng.choice([0.0, 0.0, 0.5, 1.0, 2.0])
            length = rng.choice([0.0, 0.5, 1.0, 3.0])
            state.busy["cpu:0"].append((t, t + length))
            t += length
        state.times[node]["cpu:0"] = length = rng.choice([0.0, 0.5, 1.0, 2.5])
        ready = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 20.0])
        assert state.insertion_start(node, "cpu:0", ready) == whole_scan(state.busy["cpu:0"], ready, length)
    state.busy["cpu:0"] = [(0.0, 1.0), (3.0, 4.0), (4.0, 10.0)]
    state.times[node]["cpu:0"] = 1.5
    assert state.insertion_start(node, "cpu:0", 0.5) == 1.0 and state.insertion_start(node, "cpu:0", 2.0) == 10.0
