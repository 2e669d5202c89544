"""Local search over plans: first-improvement moves from the fastest of the starting plans (the
placers' placements, each a plan, and the plans users run, such as DDP's), so it is never slower
than any of them.

Moves are coarse so the search scales: a unit of ops takes a `space.Config` (whole on a device, or
split over a run of neighbouring accelerators by batch or by weights). The units are, first, the
whole graph (one move makes a DDP-like or a one-device plan), then the ops the start runs on each
device (a placement's stage made data parallel over its neighbours), then the groups of
`placer.graph.grouping` (at most `GROUPS`; a Constant follows its group's leader), and on a
training step the readers of each shared trained weight (`shared_weight_units`). Each pass scans
every (unit, config) move in a seeded shuffled order, the whole-graph moves first, and takes a move
as soon as it lowers the simulated step time (`scoring.PlanScorer`: the inference step, or the
training step given a `TrainingSpec`) by more than `MIN_GAIN` of it and fits every device's
memory; passes repeat until one takes nothing (a local optimum) or
`samples` plans have been simulated (the starts included; a plan met again is served from the
cache and costs none). Deterministic for a seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from placer.errors import PlacerError
from placer.graph.grouping import Grouping, group_graph
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster
from placer.measure.measurement import Measurement
from placer.plans.plan import Plan
from placer.plans.scoring import PlanScorer
from placer.plans.space import configs, plan_key, replan
from placer.program.training import TrainingSpec, trained_parameters

NAME = "plan_search"
SAMPLES = 200       # simulated plans: a zoo model's search in a minute or two
GROUPS = 16         # units moved below the whole graph: few, so a pass fits the budget
MIN_GAIN = 1e-9     # a move must gain more than this share of the step time: float noise is no gain


@dataclass
class SearchResult:
    """The plan found, its simulation, where it started, and what the search spent."""

    plan: Plan
    measurement: Measurement | None
    start: str                      # the name of the starting plan it improved on
    start_time: float               # that plan's step time (infinity where no start fits)
    samples: int                    # plans simulated
    seconds: float                  # spent simulating them
    plans_per_second: float
    improvements: list[float] = field(default_factory=list)   # step time after each accepted move

    @property
    def step_time(self) -> float:
        return self.measurement.step_time if self.measurement is not None and self.measurement.ok else math.inf


def best_start(scorer: PlanScorer, starts: Mapping[str, Plan], devices: list[str]) -> tuple[str, Plan, float]:
    """The fastest start that fits (the first where none does), each costing a sample once, each
    over the searched `devices` (a DDP plan lists only its GPUs)."""
    if not starts:
        raise PlacerError("a plan search needs a plan to start from (a placement or a plan row)")
    starts = {name: Plan(list(devices), dict(plan.ops), plan.graph_sha256, extra=dict(plan.extra))
              for name, plan in starts.items()}
    timed = [(scorer.time(plan), k, name) for k, (name, plan) in enumerate(starts.items())]
    t, _, name = min(timed)
    return name, starts[name], t


def units(graph: OpGraph, start: Plan, groups: int = GROUPS,
          training: TrainingSpec | None = None) -> list[list[list[str]]]:
    """The units moved, level by level: the whole graph; the ops the start runs whole on each device
    (so a placement's stages can each become data parallel over their neighbours); each group with
    the Constants that follow it; on a training step the readers of each shared weight (last, so
    a first pass scans the levels before it as it did without it)."""
    on = {d: [n for n in graph.nodes if start.ops[n].devices == (d,)] for d in start.devices}
    levels = [[list(graph.nodes)], [ops for ops in on.values() if ops],
              group_units(unit_grouping(graph, start, groups)),
              shared_weight_units(graph) if training is not None else []]
    return [level for level in levels if level]


def shared_weight_units(graph: OpGraph) -> list[list[str]]:
    """The ops that read each trained weight read by more than one (an unrolled recurrent cell's
    weights, read at every step; a tied embedding and LM head), the largest weight first, and then
    the same with the ops that read their outputs (each step's gates). Where they run on several
    devices, each device's part of the weight's gradient crosses to be summed in every step, so a
    move takes them together."""
    consumers = graph.consumers
    shared = sorted((w for w in trained_parameters(graph) if len(consumers.get(w, ())) > 1),
                    key=lambda w: -graph.tensors[w].nbytes)
    readers = [consumers[w] for w in shared]

    def with_next(ops: list[str]) -> list[str]:
        following = [c for op in ops for t in graph.nodes[op].outputs if t for c in consumers.get(t, ())]
        return list(dict.fromkeys(ops + following))

    return readers + [with_next(ops) for ops in readers]


def unit_grouping(graph: OpGraph, start: Plan, groups: int = GROUPS) -> Grouping:
    """The groups below the whole graph (`placer.graph.grouping`, at most `groups`)."""
    return group_graph(graph, min(groups, len(graph.nodes)), len(start.devices))


def group_units(grouping: Grouping) -> list[list[str]]:
    """Each group's ops with the Constants that follow it (a plan places those too)."""
    members = [list(g) for g in grouping.groups]
    for constant, leader in grouping.followers.items():
        members[grouping.node_group[leader]].append(constant)
    return members


def plan_search(graph: OpGraph, cluster: Cluster, starts: Mapping[str, Plan], devices: list[str] | None = None,
                samples: int = SAMPLES, seed: int = 0, groups: int = GROUPS,
                training: TrainingSpec | None = None, scorer: PlanScorer | None = None) -> SearchResult:
    """Local search over plans of `graph` on `devices` (default: the cluster's) from the best of
    `starts`, on the training step with `training`. Plans are scored by `scorer` where the caller built
    one (a reduced model's, `placer.plans.reduced`), else by a `PlanScorer` of `samples`."""
    devices = devices or [d.name for d in cluster.devices]
    scorer = scorer or PlanScorer(graph, cluster, samples, training)
    name, current, best = best_start(scorer, starts, devices)
    start_time, improvements = best, []
    rng = np.random.default_rng(seed)
    options = configs(devices, scorer.device_speeds(devices))
    moves_by_level = [[(unit, c) for unit in level for c in options]
                      for level in units(graph, current, groups, training)]
    improved = True
    while improved and not scorer.spent:
        improved = False
        for moves in moves_by_level:
            for i in rng.permutation(len(moves)):
                if scorer.spent:
                    break
                unit, config = moves[i]
                candidate = replan(graph, current, unit, config)
                if plan_key(graph, candidate) == plan_key(graph, current):
                    continue
                t = scorer.time(candidate)
                if t < best * (1 - MIN_GAIN):
                    current, best, improved = candidate, t, True
                    improvements.append(t)
    return SearchResult(current, scorer.measurement(current), name, start_time, scorer.simulated, scorer.seconds,
                        scorer.plans_per_second, improvements)
