"""REINFORCE over plans: the paper's seq2seq policy (`placer.policy.seq2seq`), its action per group
a device set and a split.

The groups are the plan search's finest units (`search.unit_grouping`: `GROUPS` groups, each
with the Constants that follow it, `search.group_units`), read by the policy as the per-graph learner reads its groups
(`placer.env.features.group_features`). A group's action is one of `space.configs` (whole on a
device, or split over a run of neighbouring accelerators by batch, by weights or by speed), or
keep (the last action): as the start plan has it. A sampled row of actions is the start with each group that does
not keep replanned to its config, in graph order (`space.replan`), so a split group's neighbours
read its layout as a local search's would.

The policy first imitates the start (every group keeps, with `START_CONFIDENCE`, as the per-graph
learner imitates its warm start), so its first samples are the start and plans a few groups away from it: with the
simulated budgets of a comparison (hundreds of plans) a policy from nothing samples plans far
slower than DDP. Then each update samples `SAMPLES_PER_UPDATE` rows, scores them with a
`PlanScorer` (rewards -sqrt(step time), a plan that fails or does not fit rewarded as
`FAILURE_FACTOR` x the start) and takes the paper's policy-gradient step with an entropy bonus,
and, once a plan beats the start, the imitation of the best one found (`placer.policy.reinforce`). It stops when `samples` distinct plans have been
simulated (a plan met again is served from the cache and costs none) or after `MAX_DRAWS` x
`samples` rows drawn; a batch of plans all met before restarts it: a new policy imitating the best
row found, less surely each time (`RESTART_STEP`). The result is the fastest plan met, so never slower than the start.
Deterministic for a seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from placer.env.features import group_features
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster
from placer.plans.plan import Plan
from placer.plans.scoring import PlanScorer
from placer.plans.search import GROUPS, SAMPLES, SearchResult, best_start, group_units, unit_grouping
from placer.plans.space import configs, replan_groups
from placer.policy.hparams import Hyperparameters
from placer.policy.reinforce import reinforce_update
from placer.policy.seq2seq import Seq2SeqPolicy
from placer.policy.warm_start import imitate
from placer.program.training import TrainingSpec

NAME = "plan_reinforce"
SAMPLES_PER_UPDATE = 16   # rows per update: a comparison's budget of hundreds of plans gives tens of updates
HIDDEN = 64               # a small policy: tens of groups, a few dozen actions
START_CONFIDENCE = 0.9    # the start's probability per group after imitation: one or two groups move per row
FAILURE_FACTOR = 4.0      # a plan that fails is rewarded as this many times the start's step
MAX_DRAWS = 8             # rows drawn per distinct plan at most: a policy that settled stops
ENTROPY = 0.05            # the entropy bonus: without it the policy settles on the start within a few updates
# a policy whose whole batch was plans met before is replaced by one imitating the best plan's row,
# each restart less sure of it (more groups move per row), so that the budget is spent exploring
RESTART_STEP = 0.1
MIN_CONFIDENCE = 0.5


def plan_reinforce(graph: OpGraph, cluster: Cluster, starts: Mapping[str, Plan], devices: list[str] | None = None,
                   samples: int = SAMPLES, seed: int = 0, training: TrainingSpec | None = None,
                   scorer: PlanScorer | None = None, groups: int = GROUPS) -> SearchResult:
    """REINFORCE over plans of `graph` on `devices` (default: the cluster's) from the best of
    `starts`, on the training step with `training`. Plans are scored by `scorer` where the caller
    built one (a reduced model's, `placer.plans.reduced`), else by a `PlanScorer` of `samples`."""
    devices = devices or [d.name for d in cluster.devices]
    scorer = scorer or PlanScorer(graph, cluster, samples, training)
    name, start, start_time = best_start(scorer, starts, devices)
    best_plan, best, improvements = start, start_time, []
    grouping = unit_grouping(graph, start, groups)
    members = group_units(grouping)
    options = configs(devices, scorer.device_speeds(devices))
    keep = len(options)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    found = group_features(graph, grouping)   # read as the per-graph learner reads its groups
    features, adjacency = torch.from_numpy(found.features), torch.from_numpy(found.adjacency)
    hp = Hyperparameters(entropy_coef=ENTROPY)

    def fresh_policy(row: list[int], confidence: float):
        """A policy imitating `row` (the start's: every group keeps; after a restart, the best's)."""
        policy = Seq2SeqPolicy(features.shape[1], len(members), keep + 1, hidden_size=HIDDEN,
                               temperature=hp.temperature, tanh_constant=hp.tanh_constant)
        imitate(policy, features, adjacency, row, confidence=confidence)
        return policy, torch.optim.Adam(policy.parameters(), lr=hp.lr)

    policy, optimizer = fresh_policy([keep] * len(members), START_CONFIDENCE)
    failed = FAILURE_FACTOR * start_time if math.isfinite(start_time) else FAILURE_FACTOR
    best_row = torch.full((len(members),), keep, dtype=torch.long)
    baseline, update, drawn, restarts = 0.0, 0, 0, 0
    while not scorer.spent and drawn < MAX_DRAWS * samples:
        with torch.no_grad():
            actions, _, _ = policy(features, adjacency, n_samples=SAMPLES_PER_UPDATE, generator=generator)
        drawn += len(actions)
        rows = actions.tolist()
        plans = [replan_groups(graph, start, members, options, row) for row in rows]
        before = scorer.simulated
        found = scorer.times(plans)   # the batch simulated together
        new = scorer.simulated > before
        if len(found) < len(plans):
            break   # the budget ran out within the batch: no update on part of it
        times = []
        for row, plan, t in zip(rows, plans, found):
            times.append(t if math.isfinite(t) else failed)
            if t < best:
                best_plan, best, best_row = plan, t, torch.tensor(row)
                improvements.append(t)
        if not new:   # settled: every row a plan met before; restart from the best, less sure of it
            restarts += 1
            confidence = max(MIN_CONFIDENCE, START_CONFIDENCE - RESTART_STEP * restarts)
            policy, optimizer = fresh_policy(best_row.tolist(), confidence)
            baseline = 0.0
            continue
        rewards = -torch.sqrt(torch.tensor(times, dtype=torch.float32))
        # the best plan is imitated once it is not the start: imitating the start too settles the policy there
        stats = reinforce_update(policy, optimizer, features, adjacency, actions, rewards, baseline, hp, update,
                                 best=best_row if improvements else None)
        baseline, update = stats.new_baseline, update + 1
    return SearchResult(best_plan, scorer.measurement(best_plan), name, start_time, scorer.simulated,
                        scorer.seconds, scorer.plans_per_second, improvements)
