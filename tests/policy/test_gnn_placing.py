"""Zero-shot placing with the graph policy: of every round of both chains (from nothing, from the
best heuristic's placement), the fastest is the placement returned, and the heuristic's own only
where it is faster still."""

from __future__ import annotations

import pytest
import torch

from placer.costmodel.roofline import cluster_measurer
from placer.graph.load import load_graph
from placer.hardware import load_cluster
from placer.policy.gnn import GraphPlacementPolicy, PolicyConfig
from placer.policy.gnn.episode import make_episode
from placer.policy.gnn.placing import place_episode
from testgraphs import branches


def test_the_fastest_round_of_either_chain_is_the_placement_returned():
    graph, cluster = load_graph(branches(4, 2, width=128, batch=32)), load_cluster("4xa100-nvlink")
    episode = make_episode(graph, cluster)
    torch.manual_seed(0)
    policy = GraphPlacementPolicy(PolicyConfig(hidden=16, layers=1, heads=1, rounds=3))
    placement = place_episode(policy, episode, keep_heuristic=False)
    info = placement.extra["placer"]
    rounds = info["rounds_from_nothing"] + info["rounds_from_heuristic"]
    fastest = min(rounds)
    # the premise: the fastest is neither the first round of its chain nor the last
    assert len(set(rounds)) > 2 and rounds.index(fastest) % 3 == 1
    assert info["simulated_step_time"] == fastest and info["from_nothing_step_time"] == min(info["rounds_from_nothing"])
    assert cluster_measurer(cluster, graph).measure(placement).step_time == pytest.approx(fastest, rel=1e-9)
    # with the heuristic kept where it is faster: whichever is faster, and the policy's figure beside it
    kept = place_episode(policy, episode).extra["placer"]
    assert kept["simulated_step_time"] == min(fastest, episode.best_time)
    assert kept.get("policy_step_time", kept["simulated_step_time"]) == fastest


def test_a_stay_bonus_keeps_the_groups_where_they_are():
    """Sampled from the heuristic's placement, a large bonus keeps every group on its device, no
    bonus keeps fewer, and from nothing (no device yet) the bonus changes nothing."""
    graph, cluster = load_graph(branches(4, 2, width=128, batch=32)), load_cluster("4xa100-nvlink")
    episode = make_episode(graph, cluster)
    torch.manual_seed(0)
    policy = GraphPlacementPolicy(PolicyConfig(hidden=16, layers=1, heads=1, rounds=2))
    start = torch.from_numpy(episode.start).repeat(8, 1)
    kept = [(policy.sample(episode.tensors, 8, torch.Generator().manual_seed(0), initial=start, stay=stay)[:, 0]
             == start).float().mean().item() for stay in (0.0, 50.0)]
    assert kept[0] < 0.8 and kept[1] == 1.0
    fresh = [policy.sample(episode.tensors, 8, torch.Generator().manual_seed(0), stay=stay)[:, 0]
             for stay in (0.0, 50.0)]
    assert torch.equal(fresh[0], fresh[1])


def test_the_shipped_policys_sampled_chains_beat_uniform_proposals_with_the_same_bonuses(monkeypatch):
    """What the sampled chains find comes from the policy: on Inception-v3 and the held-out DGX-1,
    the same 64 chains drawn from uniform logits (every runnable device alike, the same bonuses
    for staying) are slower."""
    from placer.kernels.loading import load_graph as load_zoo_graph
    from placer.policy.gnn.checkpoint import PRETRAINED, load_policy

    graph, cluster = load_zoo_graph("inception_v3.onnx"), load_cluster("dgx1-v100")
    episode = make_episode(graph, cluster)
    policy, _ = load_policy(PRETRAINED)
    learned = place_episode(policy, episode, keep_heuristic=False, chains=64).extra["placer"]
    logits = policy.logits
    monkeypatch.setattr(policy, "logits", lambda *a: torch.where(torch.isfinite(out := logits(*a)),
                                                                 torch.zeros_like(out), out))
    uniform = place_episode(policy, episode, keep_heuristic=False, chains=64).extra["placer"]
    assert learned["simulated_step_time"] * 1.05 < uniform["simulated_step_time"]


def test_the_sampled_chains_start_from_every_distinct_heuristic_placement():
    """The starts are the best heuristic's very placement first, then every other list heuristic's
    and METIS's on the groups, none twice; the chains name the start of the placement returned."""
    graph, cluster = load_graph(branches(4, 2, width=128, batch=32)), load_cluster("4xa100-nvlink")
    episode = make_episode(graph, cluster)
    starts = episode.starting_points()
    names = [name for name, _ in starts]
    assert names[0].startswith("the best heuristic") and (starts[0][1] == episode.start).all()
    assert len(starts) > 2 and len({tuple(row) for _, row in starts}) == len(starts)
    assert set(names[1:]) <= {"m_etf", "m_sct", "heft", "expert", "metis"}
    torch.manual_seed(0)
    policy = GraphPlacementPolicy(PolicyConfig(hidden=16, layers=1, heads=1, rounds=2))
    info = place_episode(policy, episode, keep_heuristic=False, chains=48).extra["placer"]
    assert info["chain"].startswith(("from ", "sampled from ")) and isinstance(info["same_as_start"], bool)
