from placer_testkit import make_graph

from placer.placers import random_placement, round_robin, single_device


def test_single_device_puts_every_node_on_the_chosen_device_and_keeps_the_device_list(chain):
    p = single_device(chain, ["cpu:0", "cpu:1"], device="cpu:1")
    assert set(p.nodes.values()) == {"cpu:1"} and p.devices == ["cpu:0", "cpu:1"]
    assert set(p.nodes) == set(chain.nodes) and p.graph_sha256 == chain.sha256


def test_random_placement_is_reproducible_from_its_seed_and_uses_every_device():
    g = make_graph([(f"n{i}", [f"n{i - 1}"] if i else [], 1.0) for i in range(60)])
    a = random_placement(g, ["cpu:0", "cpu:1", "cpu:2"], seed=3)
    assert a.nodes == random_placement(g, ["cpu:0", "cpu:1", "cpu:2"], seed=3).nodes
    assert a.nodes != random_placement(g, ["cpu:0", "cpu:1", "cpu:2"], seed=4).nodes
    assert set(a.nodes.values()) == {"cpu:0", "cpu:1", "cpu:2"}


def test_round_robin_deals_groups_to_devices_in_turn(chain):
    p = round_robin(chain, ["cpu:0", "cpu:1"])
    counts = p.device_counts()
    assert abs(counts["cpu:0"] - counts["cpu:1"]) <= max(len(g) for g in _groups(chain))
    assert set(p.nodes) == set(chain.nodes)


def _groups(graph):
    from placer.placers.simple import node_groups

    return node_groups(graph)


def test_a_node_on_a_device_kind_it_cannot_run_on_moves_to_one_that_can(chain):
    chain.nodes["c"].device_kinds = frozenset({"cpu"})
    p = single_device(chain, ["cuda:0", "cpu"], device="cuda:0")
    assert p.nodes["c"] == "cpu" and p.nodes["b"] == "cuda:0"
    assert p.extra["placer"]["moved_to_supporting_device"] == 1
