"""The seq2seq policy is a proper distribution over placements, sampled reproducibly."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from placer.policy.seq2seq import Seq2SeqPolicy


def _policy(groups: int, devices: int, **kw) -> tuple[Seq2SeqPolicy, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    policy = Seq2SeqPolicy(5, groups, devices, hidden_size=16, **kw)
    features = torch.rand(groups, 5)
    adjacency = torch.rand(groups, groups)
    return policy, features, adjacency


def test_the_probabilities_of_all_placements_sum_to_one():
    policy, f, adj = _policy(3, 3)
    every = torch.tensor(list(itertools.product(range(3), repeat=3)))
    with torch.no_grad():
        _, log_prob, _ = policy(f, adj, actions=every)
    assert torch.exp(log_prob).sum().item() == pytest.approx(1.0, abs=1e-5)


def test_scoring_a_sample_gives_the_log_probability_it_was_sampled_with():
    policy, f, adj = _policy(6, 2)
    with torch.no_grad():
        actions, sampled_lp, sampled_ent = policy(f, adj, n_samples=5, generator=torch.Generator().manual_seed(1))
        scored, scored_lp, scored_ent = policy(f, adj, actions=actions)
    assert actions.shape == (5, 6) and torch.equal(actions, scored)
    assert torch.allclose(sampled_lp, scored_lp) and torch.allclose(sampled_ent, scored_ent)


def test_the_same_generator_seed_gives_the_same_samples():
    policy, f, adj = _policy(6, 3)
    with torch.no_grad():
        a, _, _ = policy(f, adj, n_samples=8, generator=torch.Generator().manual_seed(7))
        b, _, _ = policy(f, adj, n_samples=8, generator=torch.Generator().manual_seed(7))
        c, _, _ = policy(f, adj, n_samples=8, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_the_tanh_constant_bounds_how_sure_the_policy_can_be():
    policy, f, adj = _policy(4, 2, tanh_constant=1.0)
    with torch.no_grad():
        for p in policy.head.parameters():
            p.mul_(1000.0)   # huge logits before squashing
        _, log_prob, entropy = policy(f, adj, greedy=True)
    bound = math.e / (math.e + math.exp(-1.0))   # two devices, logits within [-1, 1]
    assert log_prob.item() >= 4 * math.log(1 - bound) - 1e-4
    assert torch.exp(log_prob).item() <= bound ** 4 + 1e-5
    assert entropy.item() > 0


def test_greedy_decoding_picks_the_most_likely_device_at_each_step():
    policy, f, adj = _policy(5, 3)
    with torch.no_grad():
        greedy, greedy_lp, _ = policy(f, adj, greedy=True)
        # The last step conditions on the same prefix whatever it picks: greedy must beat the others.
        for other in range(3):
            alt = greedy.clone()
            alt[0, -1] = other
            assert policy(f, adj, actions=alt)[1].item() <= greedy_lp.item() + 1e-6
