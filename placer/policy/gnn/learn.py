"""REINFORCE for the graph policy on simulated step times, across episodes.

A rollout samples K placements of an episode (every round of each: `GraphPlacementPolicy.sample`)
and simulates them in one batch. A placement's cost is its step time over the episode's yardstick
(the best list heuristic's), so a figure means the same on every graph and cluster; a failure
(out of memory) costs `failure_ratio`. The baseline is per episode and round: the mean cost of
the K samples, which is what makes costs of a fast and a slow graph comparable in one update.

Rollouts need no gradient, so they may run elsewhere (`placer.policy.gnn.rollouts` on Ray);
`update` then recomputes the log-probabilities of the actions with gradients here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch

from placer.policy.gnn.episode import Episode


@dataclass(frozen=True)
class LearnConfig:
    """How the policy learns (defaults used for the shipped checkpoint)."""

    samples: int = 16            # placements sampled per episode per update
    lr: float = 1e-3
    entropy: float = 0.01        # bonus on the mean entropy per group, against early collapse
    failure_ratio: float = 4.0   # the cost of a placement that fails, in yardsticks
    grad_clip: float = 1.0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Rollout:
    """K sampled placements of one episode: their starts (K, G; D: nothing placed), every round's
    actions (K, R, G) and costs (K, R)."""

    initial: np.ndarray
    actions: np.ndarray
    costs: np.ndarray

    def from_nothing(self, n_devices: int) -> np.ndarray:
        """(K,) which samples started from nothing (the others from the best heuristic's placement)."""
        return (self.initial == n_devices).all(axis=1)


def yardstick(episode: Episode, times: np.ndarray) -> float:
    """What step times are divided by: the best list heuristic's, else (none fits) the best sampled."""
    if math.isfinite(episode.best_time):
        return episode.best_time
    finite = times[np.isfinite(times)]
    return float(finite.min()) if finite.size else 1.0


def costs_of(episode: Episode, actions: np.ndarray, failure_ratio: float) -> np.ndarray:
    """(K, R) step time over the yardstick of each round's placement (failure: `failure_ratio`)."""
    K, R, G = actions.shape
    times = episode.step_times(actions.reshape(K * R, G)).reshape(K, R)
    return relative_costs(times, yardstick(episode, times), failure_ratio)


def relative_costs(times: np.ndarray, scale: float, failure_ratio: float) -> np.ndarray:
    """Step times over `scale`, at most `failure_ratio`; a failure (inf) costs `failure_ratio`."""
    ratio = times / scale
    return np.where(np.isfinite(ratio), np.minimum(ratio, failure_ratio), failure_ratio)


def initial_placements(episode: Episode, samples: int) -> np.ndarray:
    """(K, G) starts: the first half from nothing, the rest from the best heuristic's placement
    (all from nothing when the episode has none)."""
    G, D = episode.features.n_groups, len(episode.features.devices)
    initial = np.full((samples, G), D, dtype=np.int64)
    if episode.start is not None:
        initial[samples // 2:] = episode.start
    return initial


def rollout(policy, episode: Episode, config: LearnConfig, generator: torch.Generator,
            costs: Callable[[np.ndarray], np.ndarray] | None = None) -> Rollout:
    """K sampled placements of `episode` (half of them improving the best heuristic's) and their
    costs: `costs` of the (K, R, G) actions, default simulated (`costs_of`)."""
    initial = initial_placements(episode, config.samples)
    actions = policy.sample(episode.tensors, config.samples, generator, initial=torch.from_numpy(initial)).numpy()
    return Rollout(initial, actions, costs(actions) if costs else costs_of(episode, actions, config.failure_ratio))


def update(policy, optimizer: torch.optim.Optimizer, episodes: list[Episode], rollouts: list[Rollout],
           config: LearnConfig) -> dict[str, float]:
    """One REINFORCE step over the episodes' rollouts; the update's figures."""
    policy.train()
    optimizer.zero_grad()
    total_loss, total_entropy = 0.0, 0.0
    for episode, r in zip(episodes, rollouts):
        # the baseline: the mean cost of the samples of the same start, round by round
        fresh = r.from_nothing(len(episode.features.devices))
        baseline = np.where(fresh[:, None], r.costs[fresh].mean(axis=0) if fresh.any() else 0.0,
                            r.costs[~fresh].mean(axis=0) if (~fresh).any() else 0.0)
        advantage = torch.from_numpy(baseline - r.costs).float()   # lower cost than the baseline: positive
        logp, entropy = policy.log_prob(episode.tensors, torch.from_numpy(r.actions), torch.from_numpy(r.initial))
        loss = (-(advantage * logp).mean() - config.entropy * entropy.mean()) / len(episodes)
        loss.backward()
        total_loss += loss.item()
        total_entropy += entropy.mean().item() / len(episodes)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), config.grad_clip))
    optimizer.step()
    costs = np.stack([r.costs for r in rollouts])             # (items, K, R)
    fresh = np.concatenate([r.costs[r.from_nothing(len(e.features.devices)), -1] for e, r in zip(episodes, rollouts)])
    return {"loss": total_loss, "entropy_per_group": total_entropy, "grad_norm": grad_norm,
            "cost_mean": float(costs.mean()), "cost_last_round": float(costs[:, :, -1].mean()),
            "cost_last_round_from_nothing": float(fresh.mean()) if fresh.size else float("nan"),
            "cost_best": float(costs.min(axis=(1, 2)).mean()),
            "failure_rate": float((costs >= config.failure_ratio).mean())}


