"""The REINFORCE update moves the policy the way the equations say."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from placer.policy.hparams import Hyperparameters
from placer.policy.reinforce import learning_rate, reinforce_update
from placer.policy.seq2seq import Seq2SeqPolicy
from placer.policy.warm_start import imitate

HP = Hyperparameters(hidden_size=16, lr=0.01, entropy_coef=0.0, advantage="moving_average", imitation_coef=0.0)


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    policy = Seq2SeqPolicy(4, 5, 2, hidden_size=16)
    f, adj = torch.rand(5, 4), torch.rand(5, 5)
    return policy, torch.optim.Adam(policy.parameters(), lr=HP.lr), f, adj


def _log_prob(policy, f, adj, actions):
    with torch.no_grad():
        return policy(f, adj, actions=actions)[1]


@pytest.mark.parametrize("reward, direction", [(1.0, 1), (-1.0, -1)])
def test_a_sample_better_than_the_baseline_becomes_more_likely_and_a_worse_one_less(reward, direction):
    policy, opt, f, adj = _setup()
    actions = torch.tensor([[0, 1, 1, 0, 1]])
    before = _log_prob(policy, f, adj, actions)
    reinforce_update(policy, opt, f, adj, actions, torch.tensor([reward]), 0.0, HP, 0)
    after = _log_prob(policy, f, adj, actions)
    assert direction * (after - before).item() > 0


def test_the_baseline_is_an_exponential_moving_average_of_the_mean_reward():
    policy, opt, f, adj = _setup()
    actions = torch.tensor([[0, 1, 1, 0, 1], [1, 1, 0, 0, 0]])
    stats = reinforce_update(policy, opt, f, adj, actions, torch.tensor([-1.0, -3.0]), -4.0, HP, 0)
    assert stats.baseline == -4.0
    assert stats.new_baseline == pytest.approx(0.9 * -4.0 + 0.1 * -2.0)
    assert stats.policy_loss == pytest.approx(stats.policy_loss) and stats.grad_norm > 0


def test_the_entropy_bonus_alone_makes_the_policy_less_certain():
    policy, opt, f, adj = _setup()
    hp = dataclasses.replace(HP, entropy_coef=1.0)
    actions = torch.tensor([[0, 1, 1, 0, 1]])
    # Start certain: room to become less so. The tanh-squashed logits cap a step's probability on two
    # devices at e/(e+1/e) ~ 0.88, so ask for 0.85: reachable in a few dozen steps, where 0.95 ran all 2000.
    imitate(policy, f, adj, actions[0].tolist(), confidence=0.85)
    entropies = []
    for update in range(5):   # reward equal to the baseline: no policy-gradient signal at all
        stats = reinforce_update(policy, opt, f, adj, actions, torch.tensor([-1.0]), -1.0, hp, update)
        entropies.append(stats.entropy)
    assert entropies[-1] > entropies[0]


def test_the_gradient_is_clipped_to_its_bound():
    policy, opt, f, adj = _setup()
    hp = dataclasses.replace(HP, grad_clip=1e-3, lr=1.0)
    opt = torch.optim.SGD(policy.parameters(), lr=1.0)
    before = [p.detach().clone() for p in policy.parameters()]
    stats = reinforce_update(policy, opt, f, adj, torch.tensor([[0, 1, 1, 0, 1]]), torch.tensor([100.0]), 0.0, hp, 0)
    moved = torch.sqrt(sum(((p.detach() - b) ** 2).sum() for p, b in zip(policy.parameters(), before)))
    assert stats.grad_norm > 1e-3 and moved.item() == pytest.approx(1e-3, rel=1e-3)


def test_the_learning_rate_decays_in_stairs_after_its_start():
    hp = Hyperparameters(lr=0.1, lr_decay=0.5, lr_decay_every=10, lr_decay_start=100)
    assert learning_rate(hp, 0) == learning_rate(hp, 109) == 0.1
    assert learning_rate(hp, 110) == pytest.approx(0.05) and learning_rate(hp, 125) == pytest.approx(0.025)


def test_normalized_advantages_rank_the_samples_of_a_batch_whatever_the_reward_scale():
    policy, opt, f, adj = _setup()
    hp = dataclasses.replace(HP, advantage="normalized")
    actions = torch.tensor([[0, 1, 1, 0, 1], [1, 0, 0, 1, 0]])
    before = _log_prob(policy, f, adj, actions)
    stats = reinforce_update(policy, opt, f, adj, actions, torch.tensor([-1000.0, -1000.5]), 0.0, hp, 0)
    after = _log_prob(policy, f, adj, actions)
    assert stats.baseline == pytest.approx(-1000.25)              # the batch mean, not the moving average
    assert after[0] > before[0] and after[1] < before[1]          # the better sample gains, the worse loses


def test_ppo_takes_several_clipped_steps_on_one_batch():
    policy, opt, f, adj = _setup()
    hp = dataclasses.replace(HP, algorithm="ppo", ppo_epochs=3, advantage="normalized")
    actions = torch.tensor([[0, 1, 1, 0, 1], [1, 0, 0, 1, 0]])
    reinforce_update(policy, opt, f, adj, actions, torch.tensor([-1.0, -2.0]), 0.0, hp, 0)
    assert opt.state_dict()["state"][0]["step"].item() == 3


def test_the_best_known_placement_is_imitated_even_when_every_sample_ties():
    policy, opt, f, adj = _setup()
    hp = dataclasses.replace(HP, imitation_coef=1.0)
    best = torch.tensor([1, 1, 0, 0, 1])
    before = _log_prob(policy, f, adj, best.view(1, -1))
    stats = reinforce_update(policy, opt, f, adj, torch.tensor([[0, 1, 1, 0, 1]]), torch.tensor([-1.0]), -1.0, hp, 0,
                             best=best)
    assert _log_prob(policy, f, adj, best.view(1, -1)) > before and stats.imitation_loss > 0
