from placer_testkit import LinearCost, make_graph

from placer.placers import metis


def test_metis_puts_two_disconnected_halves_on_different_devices_with_nothing_cut(two_halves):
    p = metis(two_halves, ["cpu:0", "cpu:1"])
    left = {p.nodes[f"p{i}"] for i in range(4)}
    right = {p.nodes[f"q{i}"] for i in range(4)}
    assert len(left) == 1 and len(right) == 1 and left != right
    assert p.extra["placer"]["edge_cut_bytes"] == 0


def test_metis_gives_a_twice_as_fast_device_about_twice_the_work():
    spec = []
    for c in range(3):  # three independent chains of 4 equal nodes
        spec += [(f"c{c}n{i}", [f"c{c}n{i - 1}"] if i else [], 1e9) for i in range(4)]
    g = make_graph(spec)
    cost = LinearCost({"fast": 2e9, "slow": 1e9})
    p = metis(g, ["fast", "slow"], cost)
    counts = p.device_counts()
    assert counts["fast"] == 8 and counts["slow"] == 4


def test_metis_on_one_device_places_everything_there(chain):
    assert set(metis(chain, ["cpu:0"]).nodes.values()) == {"cpu:0"}
