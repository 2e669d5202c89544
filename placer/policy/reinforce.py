"""The policy update: REINFORCE (the paper's), or its PPO-clipped form, plus self-imitation.

For K sampled placements a_k with rewards R_k = -sqrt(step time) and per-group log-probabilities:

    A_k       = (R_k - b) / s      b, s: the batch's mean and std ("normalized"), or b the moving
                                   average b <- decay * b + (1 - decay) * mean_k R_k and s = 1 ("moving_average")
    reinforce:  L = -1/K sum_k A_k log pi(a_k)
    ppo:        L = -1/K sum_k min(rho_k A_k, clip(rho_k, 1 - eps, 1 + eps) A_k),  rho_k = pi(a_k) / pi_old(a_k),
                repeated `ppo_epochs` times on the same batch
    loss      = L  -  beta * mean entropy per group  +  lambda * (-log pi(a*))

where a* is the best placement found so far: the cross-entropy term of Post (Gao et al., 2018),
which makes the policy's own most likely placement follow the best one it knows. Each gradient
step is an Adam step on the gradient clipped to norm `grad_clip`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from placer.policy.hparams import Hyperparameters
from placer.policy.seq2seq import Seq2SeqPolicy

ALGORITHMS = ("reinforce", "ppo")
ADVANTAGES = ("normalized", "moving_average")


@dataclass
class UpdateStats:
    """What one update did, for logging."""

    policy_loss: float
    entropy: float        # mean over samples of the summed per-group entropy
    baseline: float       # the baseline used for this update's advantages
    new_baseline: float
    grad_norm: float
    lr: float
    imitation_loss: float = 0.0   # -log pi of the best placement known


def learning_rate(hp: Hyperparameters, update: int) -> float:
    """Staircase decay: lr x lr_decay^(whole periods of lr_decay_every since lr_decay_start)."""
    periods = max(0, update - hp.lr_decay_start) // hp.lr_decay_every
    return hp.lr * hp.lr_decay ** periods


def advantages(rewards: torch.Tensor, baseline: float, hp: Hyperparameters) -> tuple[torch.Tensor, float]:
    """The advantage of each sample and the baseline it was measured against."""
    if hp.advantage == "normalized":
        mean = float(rewards.mean())
        std = float(rewards.std()) if rewards.numel() > 1 else 0.0
        return (rewards - mean) / (std + 1e-8) if std > 0 else rewards - mean, mean
    return rewards - baseline, baseline


def reinforce_update(policy: Seq2SeqPolicy, optimizer: torch.optim.Optimizer, features: torch.Tensor,
                     adjacency: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                     baseline: float, hp: Hyperparameters, update: int,
                     best: torch.Tensor | None = None) -> UpdateStats:
    """One update on the sampled `actions` (K x groups) and their `rewards` (K); `best` (groups)
    is the fastest placement known, imitated with weight `hp.imitation_coef`."""
    lr = learning_rate(hp, update)
    for group in optimizer.param_groups:
        group["lr"] = lr
    advantage, used_baseline = advantages(rewards, baseline, hp)
    K = actions.shape[0]
    # The best placement rides along as one more row of the batch: one decoder pass for both.
    batch = actions if best is None or hp.imitation_coef == 0 else torch.cat([actions, best.view(1, -1)])
    epochs = hp.ppo_epochs if hp.algorithm == "ppo" else 1
    old_log_prob = None
    for _ in range(epochs):
        _, step_log_probs, step_entropy = policy.decode(features, adjacency, actions=batch)
        log_prob = step_log_probs[:K].sum(dim=1)
        if hp.algorithm == "ppo":
            if old_log_prob is None:
                old_log_prob = log_prob.detach()
            ratio = torch.exp(log_prob - old_log_prob)
            clipped = ratio.clamp(1.0 - hp.ppo_clip, 1.0 + hp.ppo_clip)
            policy_loss = -torch.min(ratio * advantage, clipped * advantage).mean()
        else:
            policy_loss = -(advantage * log_prob).mean()
        entropy = step_entropy[:K].mean()
        # Summed over groups like the policy-gradient term, so the two weigh alike at any group count.
        imitation = -step_log_probs[K:].sum() if batch.shape[0] > K else step_log_probs.new_zeros(())
        loss = policy_loss - hp.entropy_coef * entropy + hp.imitation_coef * imitation
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), hp.grad_clip)
        optimizer.step()
    new_baseline = hp.baseline_decay * baseline + (1.0 - hp.baseline_decay) * float(rewards.mean())
    return UpdateStats(policy_loss.item(), step_entropy[:K].sum(dim=1).mean().item(), used_baseline, new_baseline,
                       float(grad_norm), lr, float(imitation.detach()))
