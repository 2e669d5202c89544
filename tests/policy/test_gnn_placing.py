"""Zero-shot placing with the graph policy: of every round of both chains (from nothing, from the
best heuristic's placement), the fastest is the placement returned, and the heuristic's own only
where it is faster still."""

from __future__ import annotations

import pytest
import torch

from placer.costmodel.roofline import cluster_measurer
from placer.errors import PlacerError
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


def test_where_every_round_overflows_a_device_the_heuristics_placement_that_fits_is_returned(monkeypatch):
    """Llama-2-70B on 8xh100-nvlink: every round of the shipped policy overflowed a GPU while heft's
    placement fits, and `place` exited 2. Here a policy that puts every group on a device too small
    for the graph: the best heuristic's placement comes back, fitting, and says why; the policy's
    own figure is None (no round fits), not a step time."""
    import dataclasses

    graph, cluster = load_graph(branches(4, 2, width=128, batch=32)), load_cluster("4xa100-nvlink")
    small = dataclasses.replace(cluster.devices[0], model=dataclasses.replace(cluster.devices[0].model,
                                                                              memory_bytes=4096))
    cramped = dataclasses.replace(cluster, devices=(small, *cluster.devices[1:]))
    episode = make_episode(graph, cramped)
    torch.manual_seed(0)
    policy = GraphPlacementPolicy(PolicyConfig(hidden=16, layers=1, heads=1, rounds=2))
    monkeypatch.setattr(policy, "logits", lambda x, encoded, assign: torch.where(
        torch.arange(x.mask.shape[1]) == 0, 0.0, -1e9).expand(len(assign), *x.mask.shape))
    assert episode.start is not None and (episode.start != 0).all()   # the premise: the heuristic avoids it
    placement = place_episode(policy, episode)
    info = placement.extra["placer"]
    assert info["rounds_from_nothing"] == [None, None] and info["rounds_from_heuristic"] == [None, None]
    assert info["policy_step_time"] is None and "overflowed a device's memory" in info["chain"]
    assert cramped.devices[0].name not in placement.nodes.values()
    measured = cluster_measurer(cramped, graph).measure(placement)
    assert measured.failure is None and measured.step_time == pytest.approx(episode.best_time, rel=1e-9)
    # the policy's own placement alone (fine-tuning's view): no round fits, one line says so
    with pytest.raises(PlacerError, match="within its devices' memory"):
        place_episode(policy, episode, keep_heuristic=False)
    # pre-training's held-out figures: a row with the failure, not a ratio of None
    from placer.corpus.items import CorpusItem
    from placer.policy.gnn.pretrain import held_out_figures

    row, = held_out_figures(policy, [CorpusItem("cramped", "branches", graph, cramped)])
    assert "overflowed a device's memory" in row["failure"] and row["ratio_to_best_baseline"] is None
