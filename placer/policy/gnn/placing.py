"""Zero-shot placing with a graph policy: every round of improvement simulated, the fastest kept."""

from __future__ import annotations

import math

import numpy as np
import torch

from placer.errors import PlacerError
from placer.policy.gnn.episode import Episode, make_episode


def place_episode(policy, episode: Episode, greedy: bool = True, seed: int = 0):
    """The `Placement` of `episode` by `policy`: each round's placement (greedy, or one sample with
    `seed`) simulated in one batch, the fastest that runs and fits kept. Its extra["placer"]
    records every round's simulated step time and which was kept."""
    generator = torch.Generator().manual_seed(seed)
    policy.eval()
    actions = policy.sample(episode.tensors, 1, generator, greedy=greedy)[0].numpy()   # (R, G)
    times = episode.step_times(actions)
    best = int(np.argmin(times))
    if not math.isfinite(times[best]):
        raise PlacerError(f"no placement the policy made of {episode.name} runs on {episode.cluster.name} within its "
                          "devices' memory; try another cluster with more memory, or fine-tune the policy "
                          "(placer train --policy pretrained)")
    return episode.placement(actions[best], round=best, rounds=[float(t) for t in times],
                             simulated_step_time=float(times[best]), groups=episode.features.n_groups)


def place(policy, graph, cluster, cost=None, greedy: bool = True, seed: int = 0):
    """`place_episode` on `graph` and `cluster` (no yardstick is computed)."""
    return place_episode(policy, make_episode(graph, cluster, cost, yardstick=False), greedy, seed)
