"""FlexFlow's search (Jia et al., MLSys 2019, section 5), a baseline beside `search.plan_search`:
Metropolis-Hastings over per-op configurations. Each step proposes the current plan with one op,
drawn uniformly, set to a configuration drawn uniformly (`space.configs`: whole on a device, or
split over a run of accelerators), and accepts it with probability

    min(1, exp(-BETA * (new - old) / old))

(a plan that does not fit or cannot be lowered is never accepted). The best plan met is the
result. It starts where the local search does (the fastest start), and stops after the same
`samples` simulated plans; a proposal met before costs none, so the proposals are also capped
(`PROPOSALS` per sample) lest a chain stuck among known plans run forever. Deterministic for a seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster
from placer.plans.plan import Plan
from placer.plans.scoring import PlanScorer
from placer.plans.search import SAMPLES, SearchResult, best_start
from placer.plans.space import configs, replan
from placer.program.training import TrainingSpec

NAME = "mcmc"
# The temperature on the relative change: a plan 5% slower is accepted with probability
# exp(-1) = 0.37, 20% slower with 0.02 (FlexFlow's paper gives no figure).
BETA = 20.0
PROPOSALS = 50


def mcmc(graph: OpGraph, cluster: Cluster, starts: Mapping[str, Plan], devices: list[str] | None = None,
         samples: int = SAMPLES, seed: int = 0, beta: float = BETA,
         training: TrainingSpec | None = None, scorer: PlanScorer | None = None) -> SearchResult:
    """Metropolis-Hastings over plans of `graph` on `devices` (default: the cluster's) from the best
    of `starts`, on the training step with `training`. Plans are scored by `scorer` where the caller built
    one (a reduced model's, `placer.plans.reduced`), else by a `PlanScorer` of `samples`."""
    devices = devices or [d.name for d in cluster.devices]
    scorer = scorer or PlanScorer(graph, cluster, samples, training)
    name, current, now = best_start(scorer, starts, devices)
    best_plan, best, start_time, improvements = current, now, now, []
    rng = np.random.default_rng(seed)
    ops, options = list(graph.nodes), configs(devices, scorer.device_speeds(devices))
    for _ in range(PROPOSALS * samples):
        if scorer.spent:
            break
        op = ops[rng.integers(len(ops))]
        proposal = replan(graph, current, [op], options[rng.integers(len(options))])
        t = scorer.time(proposal)
        if t < now or (math.isfinite(t) and rng.random() < math.exp(-beta * (t - now) / now)):
            current, now = proposal, t
            if t < best:
                best_plan, best = proposal, t
                improvements.append(t)
    return SearchResult(best_plan, scorer.measurement(best_plan), name, start_time, scorer.simulated,
                        scorer.seconds, scorer.plans_per_second, improvements)
