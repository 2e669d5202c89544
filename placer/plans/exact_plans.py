"""The exact solver over plans: CP-SAT gives each coarsened group of ops either one device or its
batch split over a block of neighbouring accelerators, and orders the groups' tasks, minimising the
makespan of its model of the step; the plan it finds is then simulated, and kept only where the
simulator finds it faster than the start (`search.best_start`). A search beside local search, MCMC
and REINFORCE over plans, as `placer.placers.exact` is beside the placers.

The model is the placement solver's (`placer.placers.exact.build_problem`: groups made acyclic,
one task per group and phase, copies between groups on different devices, the memory of what each
group touches, nothing freed), with split options added:

- Options: each device whole; the batch split (`space.BATCH`) over each block of the accelerators
  (`blocks`: the whole pool, then aligned blocks halved down to pairs), so that 8 GPUs give 7
  blocks, not `space.split_sets`' 28; over a block of unequal devices, also the batch cut in
  proportion to their speeds (`space.BY_SPEED`).
- A split task runs on every device of its block at once, for its slowest shard: the shards' times
  are read from the program of the whole graph split over that block (lowered and priced as the
  simulator prices any plan), summed per group, phase and device.
- On a training step a split group's weights' gradients are all-reduced over its block between its
  backward and its update, as a ring moves them: 2(n-1) steps of a 1/n slice over the block's
  slowest neighbouring pair. The all-reduces share one link resource (they never overlap each
  other, as over one PCIe bridge), and overlap the devices' compute, as DDP's buckets do.
- A copy between two groups costs, by their options: whole to whole, the tensor over the pair;
  whole to split or split to whole, a 1/n slice over the slowest pair (the slices move at once);
  between two different blocks, a slice of the smaller block's; within one block, nothing (both
  hold the batch's same slices).
- Memory: a split group counts whole on each of its devices (its activations are a 1/n slice in
  fact: the model over-counts, never under).

Where the model is only approximate (copies that queue on shared links, an op with no batch split
replicated, launches), the simulator has the last word: the solver's plan is returned only where it
simulates faster than the start, which is returned otherwise, so the row is never slower than the
fastest start. Deterministic: one CP-SAT worker, seeded, stopped by its deterministic time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from placer.costmodel.roofline import RooflineCostModel
from placer.costmodel.sim_program import SimProgram, inference_program
from placer.costmodel.training_costs import TrainingStepCosts
from placer.devices import device_kind
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster
from placer.placers.exact import (BACKWARD, GROUPS, TIME_LIMIT, UPDATE, Problem, add_copies, add_hints,
                                  add_load_bounds, add_memory_caps, add_tasks, build_problem, default_work_limit,
                                  deterministic_solver, model_parts, step_phases)
from placer.plans.lower import lower
from placer.plans.lowered import Lowered
from placer.plans.plan import Plan
from placer.plans.pricing import plan_cost
from placer.plans.scoring import PlanScorer
from placer.plans.search import SAMPLES, SearchResult, best_start
from placer.plans.layout import Shard
from placer.plans.space import BATCH, BY_SPEED, PARTS, Config, device_speeds, replan
from placer.plans.training import plan_training_step
from placer.program.training import TrainingSpec

NAME = "plan_exact"
TICKS = 200_000   # ticks in the start's simulated step: the model's time resolution


@dataclass
class Model:
    """The placement solver's problem with each group's options and their figures (seconds)."""

    problem: Problem
    options: list[Config]            # whole on one device, or the batch split over a block (evenly or by speed)
    seconds: np.ndarray              # tasks x options x devices: the task's time on each of its devices (nan: not there)
    sync: np.ndarray                 # parts x options: the all-reduce of a split group's gradients
    caps: list[int | None]           # each device's memory (None: uncapped)


def blocks(devices: list[str]) -> list[tuple[str, ...]]:
    """The blocks a batch is split over: the accelerators (every device where fewer than two), then
    aligned blocks of the largest power of two below their number, halved down to pairs."""
    gpus = [d for d in devices if device_kind(d) == "cuda"]
    pool = gpus if len(gpus) >= 2 else list(devices)
    if len(pool) < 2:
        return []
    out, size = [tuple(pool)], 1 << (len(pool) - 1).bit_length() - 1   # then the largest power of two below
    while size >= 2:
        out += [tuple(pool[i:i + size]) for i in range(0, len(pool) - size + 1, size)]
        size //= 2
    return out


def plan_exact(graph: OpGraph, cluster: Cluster, starts: Mapping[str, Plan], devices: list[str] | None = None,
               samples: int = SAMPLES, seed: int = 0, training: TrainingSpec | None = None,
               scorer: PlanScorer | None = None, groups: int = GROUPS, time_limit: float = TIME_LIMIT,
               work_limit: float | None = None) -> SearchResult:
    """CP-SAT over plans of `graph` on `devices` (default: the cluster's), hinted with the fastest of
    `starts`; the solver's plan where it simulates faster than that start, else the start."""
    devices = devices or [d.name for d in cluster.devices]
    scorer = scorer or PlanScorer(graph, cluster, samples, training)
    began = time.perf_counter()
    name, start, start_time = best_start(scorer, starts, devices)
    if not math.isfinite(start_time) or scorer.spent:
        return _result(scorer, start, name, start_time, [])
    parts = model_parts(graph, groups, _labels(graph, start))
    model = build_model(graph, cluster, devices, start, parts, training)
    hint = [_option_of(start, members, model.options) for members in parts]
    chosen = solve_options(model, hint, start_time / TICKS, time_limit=time_limit,
                           work_limit=default_work_limit(time_limit) if work_limit is None else work_limit,
                           seed=seed)
    improvements = []
    if chosen is not None and chosen != hint:
        found = start
        for members, o in zip(parts, chosen):
            found = replan(graph, found, members, model.options[o])
        t = scorer.time(found)
        if t < start_time:
            start = found
            improvements.append(t)
    scorer.seconds = max(scorer.seconds, time.perf_counter() - began)
    return _result(scorer, start, name, start_time, improvements)


def _result(scorer: PlanScorer, plan: Plan, name: str, start_time: float, improvements: list[float]) -> SearchResult:
    return SearchResult(plan, scorer.measurement(plan), name, start_time, scorer.simulated, scorer.seconds,
                        scorer.plans_per_second, improvements)


def _labels(graph: OpGraph, plan: Plan) -> dict[str, str]:
    """Each op's devices as one label: groups are kept apart where the start runs them apart."""
    return {n: ",".join(plan.ops[n].devices) for n in graph.nodes}


def _option_of(plan: Plan, members: list[str], options: list[Config]) -> int:
    """The option most of the group's ops take in `plan`: its devices and the parts its shards are
    cut by (the first option where none is one)."""
    counts: dict[tuple, int] = {}
    for n in members:
        op = plan.ops[n]
        cuts = [x.parts for x in op.outputs if isinstance(x, Shard)]
        key = (op.devices, cuts[0] if cuts else None)
        counts[key] = counts.get(key, 0) + 1
    taken = {(c.devices, c.parts): o for o, c in enumerate(options)}
    for key, _ in sorted(counts.items(), key=lambda kv: -kv[1]):
        if key in taken:
            return taken[key]
    return 0


def build_model(graph: OpGraph, cluster: Cluster, devices: list[str], start: Plan, parts: list[list[str]],
                training: TrainingSpec | None) -> Model:
    """The placement problem over `parts` with every block's split as an option."""
    roofline = RooflineCostModel(cluster, graph)
    cost = TrainingStepCosts(graph, devices, roofline, training) if training is not None else roofline
    problem = build_problem(graph, devices, cost, parts)
    D = len(devices)
    split_over = blocks(devices)
    options = [Config((d,)) for d in devices] + [Config(b, BATCH) for b in split_over]
    speeds = device_speeds(graph, roofline, devices)
    for block in split_over:   # a block of unequal devices: its batch cut by speed too (as `space.configs`)
        fastest = max(speeds[d] for d in block)
        cut = tuple(max(1, round(PARTS * speeds[d] / fastest)) for d in block)
        if len(set(cut)) > 1:
            options.append(Config(block, BY_SPEED, cut))
    seconds = np.full((len(problem.tasks), len(options), D), np.nan)
    for d in range(D):
        seconds[:, d, d] = problem.seconds[:, d]
    sync = np.zeros((len(parts), len(options)))
    task_of = {task: k for k, task in enumerate(problem.tasks)}
    for o, option in enumerate(options):
        block = option.devices
        if len(block) == 1:
            continue
        try:
            lowered, program = _split_program(graph, replan(graph, start, list(graph.nodes), option), cluster,
                                              devices, training)
        except PlacerError:   # a layout the lowering cannot make: no group takes this option
            seconds[:, o, [devices.index(x) for x in block]] = np.inf
            continue
        part_of = _part_of_lowered(graph, lowered, parts)
        where = [devices.index(lowered.placement.nodes[n]) for n in lowered.graph.nodes]
        names = list(lowered.graph.nodes)
        for step, k, phase, times in zip(program.steps, program.node_of, step_phases(program), program.times):
            task = task_of.get((part_of[names[k]], phase))
            if task is None:   # a collective's step of a phase the group has no task in: its neighbour's
                task = task_of.get((part_of[names[k]], 0))
            if task is None:
                continue
            d = where[k]
            seconds[task, o, d] = (0.0 if np.isnan(seconds[task, o, d]) else seconds[task, o, d]) + times[d]
        for k, _ in enumerate(problem.tasks):   # a device of the block with none of the task's steps: idle
            for d in (devices.index(x) for x in block):
                if np.isnan(seconds[k, o, d]):
                    seconds[k, o, d] = 0.0
        if training is not None:
            for p, members in enumerate(parts):
                sync[p, o] = _ring_all_reduce(roofline, block, _weight_bytes(graph, members))
    caps = [next(x.model.memory_bytes for x in cluster.devices if x.name == d) for d in devices]
    return Model(problem, options, seconds, sync, caps)


def _ring_all_reduce(link: RooflineCostModel, block: tuple[str, ...], nbytes: int) -> float:
    """A ring all-reduce of `nbytes` over `block`: 2(n-1) steps of an n-th of them, each over the
    block's slowest neighbouring pair (0 for no bytes)."""
    if not nbytes:
        return 0.0
    n = len(block)
    pairs = [(block[i], block[(i + 1) % n]) for i in range(n)]
    return 2 * (n - 1) * max(link.transfer_time(nbytes // n, a, b) for a, b in pairs)


def _split_program(graph: OpGraph, plan: Plan, cluster: Cluster, devices: list[str],
                   training: TrainingSpec | None) -> tuple[Lowered, SimProgram]:
    """`plan` lowered and its step's program (the training step's, with its collectives)."""
    if training is not None:
        step = plan_training_step(graph, plan, cluster, training)
        return step.lowered, step.program
    lowered = lower(graph, plan)
    cost = plan_cost(lowered, lambda g: RooflineCostModel(cluster, g))
    return lowered, inference_program(lowered.graph, devices, cost)


def _part_of_lowered(graph: OpGraph, lowered: Lowered, parts: list[list[str]]) -> dict[str, int]:
    """The group of each node of the lowered graph: its source op's; a layout change's, the group of
    the first op it feeds (else of the op that feeds it)."""
    group = {n: p for p, members in enumerate(parts) for n in members}
    out: dict[str, int] = {}
    for name in lowered.graph.nodes:
        source = lowered.shard_of.get(name, name)
        if source in group:
            out[name] = group[source]
    dag = lowered.graph.dag
    for name in reversed(list(lowered.graph.nodes)):   # readers first: a chain of steps takes its reader's
        if name not in out:
            after = [out[s] for s in dag.successors(name) if s in out]
            if after:
                out[name] = min(after)
    for name in lowered.graph.nodes:
        if name not in out:
            before = [out[s] for s in dag.predecessors(name) if s in out]
            out[name] = max(before) if before else 0
    return out


def _weight_bytes(graph: OpGraph, members: list[str]) -> int:
    """Bytes of the weights the group's ops read (each once)."""
    weights = {t for n in members for t in graph.nodes[n].inputs if t in graph.initializers}
    return sum(graph.initializers[t].nbytes for t in weights)


class Ticks:
    """The model in integer ticks of `unit` seconds: each task's duration under each option, each
    split group's all-reduce, and the copy between two groups by their options."""

    def __init__(self, model: Model, unit: float) -> None:
        problem = self.problem = model.problem
        self.model, self.unit = model, unit
        slowest = np.where(np.isnan(model.seconds), -np.inf, model.seconds).max(axis=2)   # inf: cannot run there
        self.allowed = np.ones((len(problem.parts), len(model.options)), dtype=bool)
        for k, (p, _) in enumerate(problem.tasks):
            self.allowed[p] &= np.isfinite(slowest[k])
        self.dur = np.where(np.isfinite(slowest), np.round(np.where(np.isfinite(slowest), slowest, 0) / unit),
                            -1).astype(np.int64)
        self.sync = np.round(model.sync / unit).astype(np.int64)
        index = {d: i for i, d in enumerate(problem.devices)}
        self.on = [[index[d] for d in o.devices] for o in model.options]
        self.backward = {p: [k for k, (q, phase) in enumerate(problem.tasks) if q == p and phase == BACKWARD]
                         for p in range(len(problem.parts))}
        self.update = {p: [k for k, (q, phase) in enumerate(problem.tasks) if q == p and phase == UPDATE]
                       for p in range(len(problem.parts))}

    def delay(self, edge: tuple[int, int], oa: int, ob: int) -> int:
        a, b = self.model.options[oa].devices, self.model.options[ob].devices
        if oa == ob and len(a) > 1:   # one block's same slices
            return 0
        seconds = self.problem.pair_seconds[edge]
        if len(a) == 1 and len(b) == 1:
            return int(round(seconds[self.on[oa][0], self.on[ob][0]] / self.unit))
        n = max(len(a), len(b)) if len(a) == 1 or len(b) == 1 else min(len(a), len(b))
        worst = max((seconds[i, j] for i in self.on[oa] for j in self.on[ob] if i != j), default=0.0)
        return int(round(worst / n / self.unit))

    def synced(self, p: int) -> bool:
        """Whether group p's gradients can need an all-reduce (it has weights and a backward task)."""
        return bool(self.sync[p].any()) and bool(self.backward[p])

    def schedule(self, choice: list[int]) -> tuple[list[int], list[int], dict[int, int], int]:
        """The list schedule of `choice` (tasks in the problem's order, each as early as its devices,
        its inputs and, for an update, its group's all-reduce allow): starts, ends, each all-reduce's
        start, the makespan. A solution of the model (memory aside), so its makespan bounds the optimum."""
        problem = self.problem
        start, end = [0] * len(problem.tasks), [0] * len(problem.tasks)
        free, link = [0] * len(problem.devices), 0
        preds: dict[int, list[int]] = {}
        for a, b in problem.edges:
            preds.setdefault(b, []).append(a)
        sync_start: dict[int, int] = {}
        for k in problem.order:
            p = problem.tasks[k][0]
            o = choice[p]
            s = max(free[d] for d in self.on[o])
            for a in preds.get(k, []):
                wait = self.delay((a, k), choice[problem.tasks[a][0]], o) if problem.tasks[a][0] != p else 0
                s = max(s, end[a] + wait)
            if k in self.update[p] and self.synced(p):
                if p not in sync_start:
                    sync_start[p] = max([link] + [end[b] for b in self.backward[p]])
                    link = sync_start[p] + int(self.sync[p, o])
                s = max(s, sync_start[p] + int(self.sync[p, o]))
            start[k], end[k] = s, s + int(self.dur[k, o])
            for d in self.on[o]:
                free[d] = end[k]
        ends = end + [sync_start[p] + int(self.sync[p, choice[p]]) for p in sync_start]
        return start, end, sync_start, max(ends, default=0)


def solve_options(model: Model, hint: list[int], unit: float, *, time_limit: float, work_limit: float,
                  seed: int = 0) -> list[int] | None:
    """Each group's option minimising the model's makespan, hinted with `hint` and its list
    schedule (None where CP-SAT finds nothing faster than the hint in the model, or nothing in time)."""
    from ortools.sat.python import cp_model

    ticks = Ticks(model, unit)
    problem, dur, sync, on = model.problem, ticks.dur, ticks.sync, ticks.on
    P, O = len(problem.parts), len(model.options)
    hinted = all(ticks.allowed[p, o] for p, o in enumerate(hint))
    if hinted:
        s_hint, e_hint, sync_hint, horizon = ticks.schedule(hint)
    else:
        horizon = int(dur.clip(0).max(axis=1).sum() + sync.max(axis=1).sum()
                      + sum(max(ticks.delay(e, a, b) for a in range(O) for b in range(O)) for e in problem.edges))
    m = cp_model.CpModel()
    y = [[m.NewBoolVar(f"y{p}_{o}") if ticks.allowed[p, o] else None for o in range(O)] for p in range(P)]
    for p in range(P):
        m.AddExactlyOne([v for v in y[p] if v is not None])
    starts, ends = add_tasks(m, problem.tasks, y, dur, on, horizon)
    add_copies(m, problem, y, starts, ends,
               lambda edge: np.array([[ticks.delay(edge, a, b) for b in range(O)] for a in range(O)]))
    sync_vars, sync_ends, syncs = {}, [], []
    for p in (p for p in range(P) if ticks.synced(p)):
        s, e = m.NewIntVar(0, horizon, f"ss{p}"), m.NewIntVar(0, horizon, f"se{p}")
        m.Add(e == s + sum(int(sync[p, o]) * y[p][o] for o in range(O) if y[p][o] is not None and sync[p, o]))
        for k in ticks.backward[p]:
            m.Add(s >= ends[k])
        for k in ticks.update[p]:
            m.Add(starts[k] >= e)
        for o in range(O):
            if y[p][o] is not None and sync[p, o]:
                syncs.append(m.NewOptionalFixedSizeIntervalVar(s, int(sync[p, o]), y[p][o], f"sync{p}_{o}"))
        sync_vars[p] = (s, e)
        sync_ends.append(e)
    m.AddNoOverlap(syncs)   # the all-reduces share one link
    makespan = m.NewIntVar(0, horizon, "makespan")
    m.AddMaxEquality(makespan, ends + sync_ends)
    add_load_bounds(m, problem.tasks, y, dur, on, makespan)
    add_memory_caps(m, problem, y, on, model.caps)   # a split group counted whole on each of its devices
    m.Minimize(makespan)
    if hinted:
        add_hints(m, y, hint, starts, ends, s_hint, e_hint)
        for p, (s, e) in sync_vars.items():
            at = sync_hint.get(p, max([0] + [e_hint[k] for k in ticks.backward[p]]))
            m.AddHint(s, at)
            m.AddHint(e, at + int(sync[p, hint[p]]))
        m.AddHint(makespan, horizon)
    solver = deterministic_solver(seed, time_limit, work_limit)
    code = solver.Solve(m)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return [next(o for o in range(O) if y[p][o] is not None and solver.Value(y[p][o])) for p in range(P)]
