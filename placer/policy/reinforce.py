"""REINFORCE with a moving-average baseline and an entropy bonus: the policy update of the paper.

For K sampled placements a_k with rewards R_k = -sqrt(step time):

    loss      = -1/K sum_k (R_k - b) log pi(a_k)  -  beta * 1/K sum_k H(pi(. | a_k prefix))
    b        <- decay * b + (1 - decay) * 1/K sum_k R_k

followed by one Adam step on the gradient clipped to norm `grad_clip`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from placer.policy.hparams import Hyperparameters
from placer.policy.seq2seq import Seq2SeqPolicy


@dataclass
class UpdateStats:
    """What one update did, for logging."""

    policy_loss: float
    entropy: float        # mean over samples of the summed per-group entropy
    baseline: float       # the baseline used for this update's advantages
    new_baseline: float
    grad_norm: float
    lr: float


def learning_rate(hp: Hyperparameters, update: int) -> float:
    """Staircase decay: lr x lr_decay^(whole periods of lr_decay_every since lr_decay_start)."""
    periods = max(0, update - hp.lr_decay_start) // hp.lr_decay_every
    return hp.lr * hp.lr_decay ** periods


def reinforce_update(policy: Seq2SeqPolicy, optimizer: torch.optim.Optimizer, features: torch.Tensor,
                     adjacency: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                     baseline: float, hp: Hyperparameters, update: int) -> UpdateStats:
    """One REINFORCE step on the sampled `actions` (K x groups) and their `rewards` (K)."""
    lr = learning_rate(hp, update)
    for group in optimizer.param_groups:
        group["lr"] = lr
    _, log_prob, entropy = policy(features, adjacency, actions=actions)
    advantage = rewards - baseline
    policy_loss = -(advantage * log_prob).mean()
    loss = policy_loss - hp.entropy_coef * entropy.mean()
    optimizer.zero_grad()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), hp.grad_clip)
    optimizer.step()
    new_baseline = hp.baseline_decay * baseline + (1.0 - hp.baseline_decay) * float(rewards.mean())
    return UpdateStats(policy_loss.item(), entropy.mean().item(), baseline, new_baseline, float(grad_norm), lr)
