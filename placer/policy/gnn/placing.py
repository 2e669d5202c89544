"""Zero-shot placing with a graph policy: every round of improvement simulated, the fastest kept.

Two chains of rounds run: one from nothing, one improving the best list heuristic's placement on
the groups (when the episode has one). Both are the policy's own placements; the placement's
extra["placer"] records each chain's step times, so what the policy does from nothing stays visible.
Where the best list heuristic's own placement (node by node, before grouping) simulates faster
than every round, `place` returns that one and says so: a user is never handed a placement slower
than the heuristic placer already computed.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from placer.errors import PlacerError
from placer.policy.gnn.episode import Episode, make_episode
from placer.policy.gnn.learn import initial_placements


def place_episode(policy, episode: Episode, greedy: bool = True, seed: int = 0, keep_heuristic: bool = True):
    """The `Placement` of `episode` by `policy`: each round's placement of each chain (greedy, or
    sampled with `seed`) simulated in one batch, the fastest that runs and fits kept; with
    `keep_heuristic`, the best list heuristic's own placement where it is faster still (fine-tuning
    judges the policy's own, and passes False)."""
    generator = torch.Generator().manual_seed(seed)
    policy.eval()
    initial = initial_placements(episode, 2 if episode.start is not None else 1)
    actions = policy.sample(episode.tensors, len(initial), generator, greedy=greedy,
                            initial=torch.from_numpy(initial)).numpy()          # (chains, R, G)
    chains, rounds, G = actions.shape
    times = episode.step_times(actions.reshape(chains * rounds, G)).reshape(chains, rounds)
    chain, r = np.unravel_index(int(np.argmin(times)), times.shape)
    if not math.isfinite(times[chain, r]):
        raise PlacerError(f"no placement the policy made of {episode.name} runs on {episode.cluster.name} within its "
                          "devices' memory; try another cluster with more memory, or fine-tune the policy "
                          "(placer train --policy pretrained)")
    listed = [None if not math.isfinite(t) else float(t) for t in times.ravel()]
    if keep_heuristic and episode.best_assign is not None and episode.best_time < times[chain, r]:
        placement = episode.heuristic_placement()
        placement.extra = {"placer": {"name": "gnn", "chain": f"the best list heuristic ({episode.best_name}): every "
                                      "round of the policy simulated slower", "policy_step_time": float(times[chain, r]),
                                      "rounds_from_nothing": listed[:rounds], "rounds_from_heuristic": listed[rounds:] or None,
                                      "from_nothing_step_time": float(np.min(times[0])),
                                      "simulated_step_time": float(episode.best_time), "groups": G}}
        return placement
    return episode.placement(actions[chain, r], chain="from nothing" if chain == 0 else "from the best heuristic",
                             round=int(r), rounds_from_nothing=listed[:rounds],
                             rounds_from_heuristic=listed[rounds:] or None,
                             from_nothing_step_time=float(np.min(times[0])),
                             simulated_step_time=float(times[chain, r]), groups=G)


def place(policy, graph, cluster, cost=None, greedy: bool = True, seed: int = 0):
    """`place_episode` on `graph` and `cluster` (the best heuristic found first, as a start)."""
    return place_episode(policy, make_episode(graph, cluster, cost), greedy, seed)
