"""Zero-shot placing with a graph policy: every round of improvement simulated, the fastest kept.

Two chains of rounds run: one from nothing, one improving the best list heuristic's placement on
the groups (when the episode has one), each round the policy's most likely placement. `placer
place` adds chains sampled from the policy (`placer.jobs.place.SAMPLED_CHAINS` by default),
from nothing and from every list heuristic's and METIS's placement (a multi-start improvement
search whose every step is the policy's), all scored in one batch of the simulator. Every one is
the policy's own placement, chosen by its simulated step time (a start is no candidate itself,
though a round may keep it: `same_as_start` says so): nothing is trained on the new graph. The placement's extra["placer"] records
the most likely chains' step times, so what the policy does from nothing stays visible.
Where the best list heuristic's own placement (node by node, before grouping) simulates faster
than every round, or fits where every round overflows a device's memory, `place` returns that one
and says so: a user is never handed a placement slower than the heuristic placer already computed.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from placer.errors import PlacerError
from placer.policy.gnn.episode import Episode, make_episode
from placer.policy.gnn.learn import initial_placements

# The sampled chains are split evenly between the starts (nothing, the best heuristic's placement,
# every other list heuristic's and METIS's: `Episode.starting_points`) and, for each, these bonuses
# on keeping a group where it is: 0 samples whole re-placements, 2 and 4 rounds that move fewer
# groups, mostly those the policy most wants moved. On generalisation.py's 14 held-out problems,
# 192 chains: mean 1.024, worst 1.078 of the best baseline; from nothing and the best heuristic
# alone (64 chains) 1.057 and 1.246; the same chains from uniform logits 1.228 and 1.769.
STAY_BONUSES = (0.0, 2.0, 4.0)


def greedy_chains(episode: Episode) -> int:
    """The policy's most likely chains of rounds: from nothing, and from the best heuristic's
    placement where there is one."""
    return 2 if episode.start is not None else 1


def place_episode(policy, episode: Episode, greedy: bool = True, seed: int = 0, keep_heuristic: bool = True,
                  chains: int = 0):
    """The `Placement` of `episode` by `policy`: each round's placement of each chain (greedy, or
    sampled with `seed`), with `chains` chains more sampled from the policy (split evenly between
    the starts and the `STAY_BONUSES`), all simulated in one batch (extra["placer"]["simulated"]
    says how many placements), the fastest that runs and fits kept; with `keep_heuristic`, the
    best list heuristic's own placement where it is faster still (fine-tuning judges the policy's
    own, and passes False)."""
    if chains < 0:
        raise PlacerError(f"the sampled chains must be 0 or more, not {chains}")
    generator = torch.Generator().manual_seed(seed)
    policy.eval()
    initial = initial_placements(episode, greedy_chains(episode))
    actions = policy.sample(episode.tensors, len(initial), generator, greedy=greedy,
                            initial=torch.from_numpy(initial)).numpy()          # (chains, R, G)
    first = len(initial)   # the chains after these are sampled
    origins = ["from nothing", f"from the best heuristic ({episode.best_name})"][:first]
    if chains:
        G, D = episode.features.n_groups, len(episode.features.devices)
        starts = [("nothing", np.full(G, D, dtype=np.int64))] + episode.starting_points()
        pairs = [(start, stay) for start in starts for stay in STAY_BONUSES]
        for ((name, row), stay), share in zip(pairs, np.array_split(np.arange(chains), len(pairs))):
            if len(share):
                more = np.tile(row, (len(share), 1)).astype(np.int64)
                sampled = policy.sample(episode.tensors, len(share), generator, initial=torch.from_numpy(more),
                                        stay=stay)
                initial, actions = np.concatenate([initial, more]), np.concatenate([actions, sampled.numpy()])
                origins += [f"sampled from {name}" + (f" (stay bonus {stay:g})" if stay else "")] * len(share)
    n_chains, rounds, G = actions.shape
    times = episode.step_times(actions.reshape(n_chains * rounds, G)).reshape(n_chains, rounds)
    chain, r = np.unravel_index(int(np.argmin(times)), times.shape)
    heuristic_fits = keep_heuristic and episode.best_assign is not None and math.isfinite(episode.best_time)
    if not math.isfinite(times[chain, r]) and not heuristic_fits:
        raise PlacerError(f"no placement the policy made of {episode.name} runs on {episode.cluster.name} within its "
                          "devices' memory; try another cluster with more memory, or fine-tune the policy "
                          "(placer train --policy pretrained)")
    listed = [_seconds(t) for t in times[:first].ravel()]
    record = {"rounds_from_nothing": listed[:rounds], "rounds_from_heuristic": listed[rounds:] or None,
              "from_nothing_step_time": _seconds(np.min(times[0])), "sampled_chains": chains,
              "first_chains_step_time": _seconds(np.min(times[:first])), "groups": G,
              "simulated": n_chains * rounds}
    if heuristic_fits and episode.best_time < times[chain, r]:
        # where every round overflows a device (Llama-2-70B on 8xh100-nvlink: the rounds move most
        # groups off heft's placement, which fits), the user still gets the placement that fits
        why = "simulated slower" if math.isfinite(times[chain, r]) else "overflowed a device's memory"
        placement = episode.heuristic_placement()
        placement.extra = {"placer": {"name": "gnn", "chain": f"the best list heuristic ({episode.best_name}): every "
                                      f"round of the policy {why}",
                                      "policy_step_time": _seconds(times[chain, r]),
                                      "simulated_step_time": float(episode.best_time), **record}}
        return placement
    return episode.placement(actions[chain, r], chain=origins[chain], round=int(r),
                             same_as_start=bool((actions[chain, r] == initial[chain]).all()),
                             simulated_step_time=float(times[chain, r]), **record)


def _seconds(t: float) -> float | None:
    """A simulated step time for the record: None where no placement fits (JSON has no infinity)."""
    return float(t) if math.isfinite(t) else None


def place(policy, graph, cluster, cost=None, greedy: bool = True, seed: int = 0, chains: int = 0):
    """`place_episode` on `graph` and `cluster` (the best heuristic found first, as a start)."""
    return place_episode(policy, make_episode(graph, cluster, cost), greedy, seed, chains=chains)
