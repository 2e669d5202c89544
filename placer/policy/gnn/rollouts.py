"""Where rollouts run: here, or on Ray workers (`--workers N`), a task per batch of items.

A rollout needs no gradient (sample, simulate), so a worker gets the policy's weights and a batch
of items, builds each item's episode once (kept per worker process, by name) and returns actions
and costs; the learner then recomputes the log-probabilities with gradients. Ray is optional:
it is imported only when a pool starts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from placer.policy.gnn.episode import Episode, make_episode
from placer.policy.gnn.learn import LearnConfig, Rollout, rollout
from placer.policy.gnn.model import GraphPlacementPolicy, PolicyConfig


class LocalRollouts:
    """Rollouts in this process, one episode after another."""

    def run(self, policy: GraphPlacementPolicy, items: list[Any], episodes: list[Episode], config: LearnConfig,
            seed: int) -> list[Rollout]:
        generator = torch.Generator().manual_seed(seed)
        return [rollout(policy, episode, config, generator) for episode in episodes]

    def close(self) -> None:
        pass


_EPISODES: dict[str, Episode] = {}   # a worker's episodes, built once per item


def rollout_batch(config: dict, state: dict, learn: dict, seed: int, *items: Any) -> list[tuple]:
    """The Ray task: rollouts of `items` (with .name, .graph, .cluster) by the policy of `state`
    (items are arguments of their own, so that Ray hands over the objects, not their references)."""
    policy = GraphPlacementPolicy(PolicyConfig(**config))
    policy.load_state_dict(state)
    learn_config = LearnConfig(**learn)
    generator = torch.Generator().manual_seed(seed)
    out = []
    for item in items:
        episode = _EPISODES.get(item.name)
        if episode is None:
            episode = _EPISODES[item.name] = make_episode(item.graph, item.cluster, name=item.name)
        r = rollout(policy, episode, learn_config, generator)
        out.append((r.initial, r.actions, r.costs))
    return out


class RayRollouts:
    """Rollouts on `workers` Ray tasks at once: the items of an update split into that many batches."""

    def __init__(self, workers: int, address: str | None = None) -> None:
        from placer.workers.ray_cluster import connect, require_ray

        self.ray = require_ray()
        self.started = connect(address)
        self.workers = workers
        self._task = self.ray.remote(num_cpus=1)(rollout_batch)
        self._refs: dict[str, Any] = {}   # item name -> its object in Ray's store, put once

    def run(self, policy: GraphPlacementPolicy, items: list[Any], episodes: list[Episode], config: LearnConfig,
            seed: int) -> list[Rollout]:
        state = self.ray.put({k: v.detach().clone() for k, v in policy.state_dict().items()})
        batches = [list(range(len(items)))[k::self.workers] for k in range(self.workers)]
        futures = []
        for k, batch in enumerate(b for b in batches if b):
            refs = [self._refs.setdefault(items[i].name, self.ray.put(items[i])) for i in batch]
            futures.append((batch, self._task.remote(policy.config.to_dict(), state, config.to_dict(),
                                                     seed * 1000 + k, *refs)))
        out: list[Rollout | None] = [None] * len(items)
        for batch, future in futures:
            for i, (initial, actions, costs) in zip(batch, self.ray.get(future)):
                out[i] = Rollout(np.asarray(initial), np.asarray(actions), np.asarray(costs))
        return out   # type: ignore[return-value]

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
