import pytest
from placer_testkit import make_graph

from placer.errors import PlacerError
from placer.placers import book_peak_memory, m_topo, memory_greedy


@pytest.fixture
def six():
    """Six chained nodes, each holding 1000 bytes of weights and 4000 bytes of output."""
    names = [f"n{i}" for i in range(6)]
    return make_graph([(n, [names[i - 1]] if i else [], 1e6) for i, n in enumerate(names)],
                      numel=1000, params={n: 1000 for n in names})


def test_memory_greedy_fills_the_first_device_up_to_its_cap_then_the_next(six):
    # The 4 kB graph input and every weight stay; an output is freed once its reader is placed,
    # so node k (k >= 1) needs 4 kB + k kB of earlier weights + 4 kB of input + its own 5 kB.
    caps = {"cuda:0": 15_000, "cuda:1": 100_000}
    p = memory_greedy(six, ["cuda:0", "cuda:1"], caps=caps)
    assert [p.nodes[f"n{i}"] for i in range(6)] == ["cuda:0"] * 3 + ["cuda:1"] * 3
    assert all(used <= caps[d] for d, used in book_peak_memory(six, p).items())


def test_memory_greedy_without_caps_keeps_everything_on_the_first_device(six):
    assert set(memory_greedy(six, ["cuda:0", "cpu"]).nodes.values()) == {"cuda:0"}


def test_memory_greedy_refuses_a_graph_larger_than_all_caps_together(six):
    with pytest.raises(PlacerError, match="raise the mem= caps"):
        memory_greedy(six, ["cuda:0", "cuda:1"], caps={"cuda:0": 10_000, "cuda:1": 10_000})


def test_m_topo_gives_each_device_an_even_share_in_topological_order(six):
    p = m_topo(six, ["cpu:0", "cpu:1"])
    # share = 30 kB / 2 + 5 kB: the first device takes four nodes, the last one the rest
    assert [p.nodes[f"n{i}"] for i in range(6)] == ["cpu:0"] * 4 + ["cpu:1"] * 2


def test_m_topo_respects_a_cap_smaller_than_the_even_share(six):
    p = m_topo(six, ["cpu:0", "cpu:1"], caps={"cpu:0": 14_000})
    assert [p.nodes[f"n{i}"] for i in range(6)] == ["cpu:0"] * 2 + ["cpu:1"] * 4
    assert book_peak_memory(six, p)["cpu:0"] <= 14_000
