"""An exact placer: CP-SAT places and orders coarsened groups, under a time limit, with its proven gap.

The baseline that says how far from optimal the others are, in its own model of a step:

- Groups: one per node on graphs of at most `groups` nodes (default 40), else about `groups`
  groups (`acyclic_groups`): the co-location groups split by the device the hint gives their
  nodes and contracted like `group_graph`'s partition, lightest pairs first, but only into groups
  whose graph has no cycle (a group runs as one task) and, while they stay within 1.5 x `groups`,
  of one hint device each (so the hint is one of the model's placements).
- Tasks: each group's steps of the simulated program (`placer.costmodel.sim_program`), one task per
  phase: the forward pass; on the training objective also the loss and backward steps, and the
  updates (with the gradient sums feeding only them). A task takes the sum of its steps' times on
  its group's device and runs without interruption; tasks on one device never overlap (NoOverlap
  over optional intervals, one per device); a task starts after each task it reads from ends,
  plus the copy of the tensors between them when the two groups are on different devices
  (`transfer_time` of those bytes over that pair of devices, a constraint enforced by the two
  groups' device literals). Copies do not queue on links (the simulator's shared routes do).
- Memory: on a capped device, the weights and graph inputs its groups read (each once), every
  tensor its groups' steps make and their optimizer state, nothing ever freed: a static budget of
  weights and outputs (of the training step's tensors on that objective). The copies a device
  receives are not counted: the executor's own check (`over_caps`) has the last word, and a
  placement it refuses gives way to the hint.
- Objective: the makespan, in integer ticks (`unit` seconds each, about 2e5 ticks per hint step).

The solver is warm-started (AddHint) with the best list heuristic's placement (the fastest in the
simulator of m-ETF, m-SCT, HEFT, the expert and each single device, `placer.placers.starts.best_start`)
scheduled in its model; a solution worse than that hint is never returned (the heuristic's own
placement is, also when the solver finds nothing in time or the hint exceeds the model's memory
budget), so in its model the exact placer is never worse than the heuristic. It is deterministic: one search worker
(``num_workers=1``) seeded with `seed`, stopped by CP-SAT's deterministic time (`work_limit` of its
work units, by default `WORK_PER_SECOND` per second of `time_limit`) or by the wall clock
(`time_limit` seconds), whichever comes first; only a stop by the wall clock (recorded as
``stopped_by``) depends on the machine's speed and load.

The placement records under extra["placer"] the solver's status, its objective and proven lower
bound (`BestObjectiveBound`) in the model's seconds, and gap = (objective - bound) / objective
(0: proven optimal in the model), with the simulator's step time of the placement and of the hint.
Compare reports the simulator's figure like any other row; the model's makespan is only the
model's: a group runs whole (its readers wait for all of it), copies never queue on a shared link
and a device may run its groups in any order, where the simulator runs each node as soon as it can
in the graph's order, so a placement optimal in the model can simulate slower than the hint. Where
it does, the hint is returned (`used` "hint"), with the model's gap for it: the exact row is never
slower in the simulator than the heuristic it was hinted with.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, replace

import networkx as nx
import numpy as np

from placer.errors import PlacerError
from placer.graph.grouping import colocate, group_graph, node_cost
from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.costmodel.sim_program import SimProgram, inference_program
from placer.costmodel.training_costs import TrainingStepCosts
from placer.placement import Placement
from placer.placers.base import (Caps, does_not_fit, make_placement, over_caps, require_cost,
                                 require_devices, training_of)
from placer.placers.base import LastCall, make_simulator
from placer.placers.starts import Start, best_start

GROUPS = 40          # groups coarsened to (up to HINT_SLACK x as many to keep the hint's devices apart)
TIME_LIMIT = 10.0    # wall-clock seconds
# CP-SAT's deterministic time (its own work units: the same count for the same model, seed and
# version on any machine) allowed per second of the time limit. On two busy shared cores it counted
# 0.25-0.65 units a wall-clock second, so this stop usually comes first and the result does not
# depend on the machine's load.
WORK_PER_SECOND = 0.25
# Groups split by the hint's devices may number up to this many times `groups` before groups of
# different devices merge (the hint then counts in the model as each group's heaviest device's).
HINT_SLACK = 1.5
TICKS = 200_000      # ticks in the hint's makespan: the model's time resolution
FORWARD, BACKWARD, UPDATE = 0, 1, 2
_TRAINING_KINDS = {"loss": BACKWARD, "backward": BACKWARD, "accumulate": BACKWARD, "update": UPDATE,
                   "refresh": UPDATE}


@dataclass
class Problem:
    """The model's data: parts (node names), tasks (part, phase), integer durations and delays."""

    devices: list[str]
    parts: list[list[str]]
    tasks: list[tuple[int, int]]            # (part, phase)
    seconds: np.ndarray                     # tasks x devices, seconds (inf: cannot run)
    edges: dict[tuple[int, int], int]       # (task a, task b) -> bytes a sends b
    pair_seconds: dict[tuple[int, int], np.ndarray]   # edge -> devices x devices seconds (0 on the diagonal)
    order: list[int]                        # the tasks in a topological order
    own_bytes: np.ndarray                   # part -> bytes only it touches (and its optimizer state)
    shared: list[tuple[int, list[int]]]     # (bytes, parts) of each tensor several parts touch
    unit: float = 1.0                       # seconds per tick

    def ticks(self, seconds: float) -> int:
        return int(round(seconds / self.unit))

    @property
    def duration(self) -> np.ndarray:
        """tasks x devices, ticks (-1: cannot run)."""
        finite = np.isfinite(self.seconds)
        return np.where(finite, np.round(np.where(finite, self.seconds, 0.0) / self.unit), -1).astype(np.int64)

    def delay(self, edge: tuple[int, int]) -> np.ndarray:
        """devices x devices ticks of an edge's copy."""
        return np.round(self.pair_seconds[edge] / self.unit).astype(np.int64)

    def allowed(self) -> np.ndarray:
        """parts x devices: every task of the part can run there."""
        ok = np.ones((len(self.parts), len(self.devices)), dtype=bool)
        for k, (p, _) in enumerate(self.tasks):
            ok[p] &= np.isfinite(self.seconds[k])
        return ok

    def part_memory(self, part_device: list[int] | np.ndarray) -> list[int]:
        """Bytes each device holds in the model's memory bound under `part_device`."""
        memory = [0] * len(self.devices)
        for p, d in enumerate(part_device):
            memory[d] += int(self.own_bytes[p])
        for nbytes, parts in self.shared:
            for d in {part_device[p] for p in parts}:
                memory[d] += nbytes
        return memory

    def schedule(self, part_device: list[int] | np.ndarray, seconds: bool = False
                 ) -> tuple[list[float], list[float], float]:
        """The list schedule of `part_device`: tasks in `order`, each as early as its device (after
        its previous task) and its inputs allow; (starts, ends, makespan) in ticks (in seconds with
        `seconds`). A feasible schedule of the model, so its makespan bounds the model's optimum."""
        dur = self.seconds if seconds else self.duration
        delay = (lambda e: self.pair_seconds[e]) if seconds else self.delay
        start, end = [0] * len(self.tasks), [0] * len(self.tasks)
        free = [0] * len(self.devices)
        preds: dict[int, list[int]] = {}
        for a, b in self.edges:
            preds.setdefault(b, []).append(a)
        for k in self.order:
            d = int(part_device[self.tasks[k][0]])
            s = free[d]
            for a in preds.get(k, []):
                s = max(s, end[a] + delay((a, k))[int(part_device[self.tasks[a][0]]), d])
            start[k], end[k] = s, s + dur[k, d]
            free[d] = end[k]
        if not seconds:
            start, end = [int(v) for v in start], [int(v) for v in end]
        return start, end, max(end, default=0)


def convex_parts(graph: OpGraph, groups: list[list[str]]) -> list[list[str]]:
    """`groups` split so that the graph of parts has no cycle: a node's part is (its group, the
    most group changes on a path to it). An edge never goes to a part with fewer changes and
    crosses groups only to more, so no cycle survives."""
    group = {n: g for g, members in enumerate(groups) for n in members}
    changes: dict[str, int] = {}
    for n in graph.nodes:   # topological order
        changes[n] = max((changes[p] + (group[p] != group[n]) for p in graph.dag.predecessors(n)), default=0)
    parts: dict[tuple[int, int], list[str]] = {}
    for n in graph.nodes:
        parts.setdefault((group[n], changes[n]), []).append(n)
    return list(parts.values())


def acyclic_groups(graph: OpGraph, target: int, hint_nodes: dict[str, str] | None = None) -> list[list[str]]:
    """About `target` groups whose graph has no cycle, each on one device of `hint_nodes` where it
    can: the co-location groups (`placer.graph.grouping.colocate`) split by the hint's devices and
    made acyclic (`convex_parts`), then contracted like `group_graph`'s partition (the lightest
    pair first, the most bytes between them on ties), merging two groups of one hint device that
    no path through a third group joins (so the graph stays acyclic): neighbours first, else two
    groups with no path between them. When that leaves more than `HINT_SLACK` x `target` groups,
    groups of different hint devices merge too, down to `target`."""
    cost = {n: node_cost(node) for n, node in graph.nodes.items()}
    device = hint_nodes or {}
    start = []
    for members in colocate(graph, cap=sum(cost.values()) / max(target, 1), cost=cost):
        by_device: dict[str, list[str]] = {}
        for n in members:
            by_device.setdefault(device.get(n, ""), []).append(n)
        start += by_device.values()
    parts = {i: list(m) for i, m in enumerate(convex_parts(graph, start))}
    of = {n: i for i, m in parts.items() for n in m}
    weight = {i: sum(cost[n] for n in m) for i, m in parts.items()}
    where = {i: device.get(m[0], "") for i, m in parts.items()}
    succ: dict[int, dict[int, int]] = {i: {} for i in parts}   # part -> successor part -> bytes
    pred: dict[int, set[int]] = {i: set() for i in parts}
    for u, v, data in graph.dag.edges(data=True):
        a, b = of[u], of[v]
        if a != b:
            succ[a][b] = succ[a].get(b, 0) + int(data.get("bytes", 0))
            pred[b].add(a)

    def reachability() -> tuple[dict[int, int], dict[int, int]]:
        """Each group's bit, and the bits of every group reachable from it: one pass in a
        topological order (Kahn's) of the groups' graph, which stays acyclic."""
        indegree = {i: len(pred[i]) for i in parts}
        order = [i for i in parts if not indegree[i]]
        for i in order:   # grows as it goes
            for c in succ[i]:
                indegree[c] -= 1
                if not indegree[c]:
                    order.append(c)
        if len(order) != len(parts):   # the merges keep it acyclic (`convex_parts` starts it so)
            raise AssertionError("the groups' graph has a cycle")
        bit = {i: 1 << k for k, i in enumerate(order)}
        below: dict[int, int] = {}
        for i in reversed(order):
            reach = 0
            for c in succ[i]:
                reach |= bit[c] | below[c]
            below[i] = reach
        return bit, below

    def merge(a: int, b: int) -> None:
        parts[a] += parts.pop(b)
        weight[a] += weight.pop(b)
        if where[a] != where[b]:
            where[a] = None
        for c, nbytes in succ.pop(b).items():
            pred[c].discard(b)
            if c != a:
                succ[a][c] = succ[a].get(c, 0) + nbytes
                pred[c].add(a)
        for c in pred.pop(b):
            nbytes = succ[c].pop(b)
            if c != a:
                succ[c][a] = succ[c].get(a, 0) + nbytes
                pred[a].add(c)
        succ[a].pop(a, None)
        pred[a].discard(a)
        pred[a].discard(b)
        del where[b]

    def unrelated_pair(same_device: bool,
                       reach: tuple[dict[int, int], dict[int, int]] | None) -> tuple[int, int] | None:
        """The lightest two groups (of one hint device) with no path between them (`reach`: the
        groups' `reachability()` where this merge's scan worked it out already)."""
        bit, below = reach or reachability()
        ids = sorted(parts, key=lambda i: (weight[i], i))
        return next(((a, b) for k, a in enumerate(ids) for b in ids[k + 1:]
                     if (not same_device or where[a] == where[b])
                     and not below[a] & bit[b] and not below[b] & bit[a]), None)

    def key(a: int, b: int) -> tuple[float, int, int, int]:
        """Where the pair a -> b comes in the order of merges: the lightest first, the most bytes on ties."""
        return weight[a] + weight[b], -succ[a][b], a, b

    def contract(goal: int, same_device: bool) -> None:
        # The pairs in that order, in a heap rather than sorted afresh for each merge (thousands of
        # merges on a 10,000-node graph). A merge changes only the survivor's pairs: they are pushed
        # again, and an entry whose key is no longer its pair's is dropped when it comes up.
        def joinable(a: int, b: int) -> bool:
            return not same_device or where[a] == where[b]

        heap = [key(a, b) for a in succ for b in succ[a] if joinable(a, b)]
        heapq.heapify(heap)
        while len(parts) > goal:
            pick, passed, seen, reach = None, [], set(), None
            while heap:
                entry = heapq.heappop(heap)
                a, b = entry[2], entry[3]
                if (a, b) in seen or b not in succ.get(a, ()) or not joinable(a, b) or key(a, b) != entry:
                    continue
                seen.add((a, b))
                reach = reach or reachability()   # once per merge, where a pair is asked
                bit, below = reach
                if not any(below[c] & bit[b] for c in succ[a] if c != b):   # no path through a third group
                    pick = (a, b)
                    break
                passed.append(entry)   # joined through a third group for now: asked again after this merge
            pick = pick or unrelated_pair(same_device, reach)
            if pick is None:
                return
            merge(*pick)
            for entry in passed:
                heapq.heappush(heap, entry)
            survivor = pick[0]
            for a, b in [(survivor, c) for c in succ[survivor]] + [(c, survivor) for c in pred[survivor]]:
                if joinable(a, b):
                    heapq.heappush(heap, key(a, b))

    contract(target, same_device=bool(hint_nodes))
    if len(parts) > HINT_SLACK * target:   # the hint's devices cut too often: merge across them too
        contract(target, same_device=False)
    return list(parts.values())


def step_phases(program: SimProgram) -> list[int]:
    """The phase of each step: forward; loss and backward; the updates and the sums feeding only them."""
    phase = [_TRAINING_KINDS.get(s.op_type, FORWARD) for s in program.steps]
    readers: dict[str, list[int]] = {}
    for j, s in enumerate(program.steps):
        for t in s.inputs:
            readers.setdefault(t, []).append(j)
    for i in reversed(range(len(program.steps))):
        s = program.steps[i]
        if s.op_type == "accumulate":
            read = [j for t in s.outputs if t for j in readers.get(t, [])]
            if read and all(phase[j] == UPDATE for j in read):
                phase[i] = UPDATE
    return phase


def build_problem(graph: OpGraph, devices: list[str], cost: CostModel, parts: list[list[str]]) -> Problem:
    """The model of `graph`'s step (a training step when `cost` is a `TrainingStepCosts`) over `parts`."""
    training = isinstance(cost, TrainingStepCosts)
    program = cost.program if training else inference_program(graph, devices, cost)
    link = cost.inner if training else cost
    position = {n: i for i, n in enumerate(graph.nodes)}
    part_of_node = np.empty(len(graph.nodes), dtype=np.int64)
    for p, members in enumerate(parts):
        part_of_node[[position[n] for n in members]] = p
    phase = step_phases(program)
    task_id: dict[tuple[int, int], int] = {}
    step_task = []
    for k, ph in zip(program.node_of, phase):
        step_task.append(task_id.setdefault((int(part_of_node[k]), ph), len(task_id)))
    tasks = sorted(task_id, key=task_id.__getitem__)
    D = len(devices)
    seconds = np.zeros((len(tasks), D))
    np.add.at(seconds, np.asarray(step_task), np.asarray(program.times, dtype=float))
    producer = {t: i for i, s in enumerate(program.steps) for t in s.outputs if t}
    crossing: dict[tuple[int, int], set[str]] = {}
    for j, s in enumerate(program.steps):
        for t in s.inputs:
            i = producer.get(t)
            if i is not None and step_task[i] != step_task[j]:
                crossing.setdefault((step_task[i], step_task[j]), set()).add(t)
    edges = {e: sum(program.copy_size(t) for t in ts) for e, ts in crossing.items()}
    pair_seconds = {e: np.array([[float(link.transfer_time(nbytes, a, b)) if a != b else 0.0 for b in devices]
                                 for a in devices]) for e, nbytes in edges.items()}
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(tasks)))
    dag.add_edges_from(edges)
    first = {}
    for i, k in enumerate(step_task):
        first.setdefault(k, i)
    try:
        order = list(nx.lexicographical_topological_sort(dag, key=first.__getitem__))
    except nx.NetworkXUnfeasible:
        raise PlacerError("exact: the groups' tasks depend on each other in a cycle; try other --groups") from None
    # memory: the weights and graph inputs each part reads (once per device), the tensors its steps
    # make and its optimizer state, nothing freed
    kept = {t.name for t in graph.inputs} | set(graph.initializers)
    parts_of: dict[str, set[int]] = {}
    own = np.zeros(len(parts), dtype=np.int64)
    for step, k in zip(program.steps, program.node_of):
        p = int(part_of_node[k])
        for t in step.inputs:
            if t in kept:
                parts_of.setdefault(t, set()).add(p)
        own[p] += sum(program.size(t) for t in dict.fromkeys(step.outputs) if t)
    for nbytes, i in program.held:
        own[int(part_of_node[program.node_of[i]])] += nbytes
    shared = []
    for t, ps in parts_of.items():
        if len(ps) == 1:
            own[next(iter(ps))] += program.size(t)
        elif program.size(t):
            shared.append((int(program.size(t)), sorted(ps)))
    return Problem(list(devices), parts, tasks, seconds, edges, pair_seconds, order, own, shared)


@dataclass
class Solution:
    """What the solver found: the device of each part and the model's figures (ticks)."""

    part_device: list[int]
    status: str
    objective: int | None
    bound: int | None
    hint_objective: int | None
    used: str            # "solver", or "hint": the solver found nothing faster (or nothing)
    hint_fits: bool      # the hint is within the model's memory bound (a solution of the model)
    stopped_by: str | None
    wall_s: float
    deterministic_time: float


def add_tasks(model, tasks: list[tuple[int, int]], lits: list[list], dur: np.ndarray, on: list[list[int]],
              horizon: int) -> tuple[list, list]:
    """Each task's start and end in `model`, and an interval on each device of each option its
    part may take (`lits[p][o]`, None where it may not; option o runs on the devices `on[o]` for
    `dur[k, o]` ticks), the intervals of one device never overlapping. Gives (starts, ends)."""
    starts, ends = [], []
    per_device: list[list] = [[] for _ in range(1 + max((d for o in on for d in o), default=0))]
    for k, (p, _) in enumerate(tasks):
        s = model.NewIntVar(0, horizon, f"s{k}")
        e = model.NewIntVar(0, horizon, f"e{k}")
        model.Add(e == s + sum(int(dur[k, o]) * lit for o, lit in enumerate(lits[p]) if lit is not None))
        for o, lit in enumerate(lits[p]):
            if lit is not None:
                for d in on[o]:
                    per_device[d].append(model.NewOptionalFixedSizeIntervalVar(s, int(dur[k, o]), lit, f"i{k}_{o}_{d}"))
        starts.append(s)
        ends.append(e)
    for intervals in per_device:
        model.AddNoOverlap(intervals)
    return starts, ends


def add_copies(model, problem: Problem, lits: list[list], starts: list, ends: list, delays) -> None:
    """Each edge's reader starts after its writer ends, and after the copy between them where their
    parts' options differ (`delays(edge)`: options x options ticks, 0 where none is needed)."""
    for (a, b) in problem.edges:
        model.Add(starts[b] >= ends[a])
        pa, pb = problem.tasks[a][0], problem.tasks[b][0]
        if pa == pb:
            continue
        delay = delays((a, b))
        for oa, la in enumerate(lits[pa]):
            for ob, lb in enumerate(lits[pb]):
                if delay[oa, ob] > 0 and la is not None and lb is not None:
                    model.Add(starts[b] >= ends[a] + int(delay[oa, ob])).OnlyEnforceIf([la, lb])


def add_load_bounds(model, tasks: list[tuple[int, int]], lits: list[list], dur: np.ndarray, on: list[list[int]],
                    makespan) -> None:
    """Each device's work within the makespan: redundant with NoOverlap, but its linear relaxation
    is the load bound."""
    for d in range(1 + max((d for o in on for d in o), default=0)):
        model.Add(sum(int(dur[k, o]) * lit for k, (p, _) in enumerate(tasks) for o, lit in enumerate(lits[p])
                      if lit is not None and d in on[o]) <= makespan)


def add_memory_caps(model, problem: Problem, lits: list[list], on: list[list[int]],
                    caps: list[int | None]) -> list[tuple[object, int, list[int]]]:
    """Each capped device's memory bound: the bytes only a part touches wherever one of its options
    runs on the device, and each tensor several parts touch once where any of them does (a literal
    `w` per tensor and device). Gives each such (w, device, the parts touching it)."""
    shared_on = []
    for d, cap in enumerate(caps):
        if cap is None:
            continue
        held = [[lit for o, lit in enumerate(options) if lit is not None and d in on[o]] for options in lits]
        terms = [int(problem.own_bytes[p]) * lit for p, here in enumerate(held) for lit in here]
        for i, (nbytes, parts) in enumerate(problem.shared):
            present = [lit for p in parts for lit in held[p]]
            if present:
                w = model.NewBoolVar(f"w{i}_{d}")
                for lit in present:
                    model.AddImplication(lit, w)
                terms.append(nbytes * w)
                shared_on.append((w, d, parts))
        model.Add(sum(terms) <= int(cap))
    return shared_on


def add_hints(model, lits: list[list], choice: list[int], starts: list, ends: list, s_hint: list[int],
              e_hint: list[int]) -> None:
    """Hint `choice` (each part's option) and its schedule's starts and ends."""
    for p, options in enumerate(lits):
        for o, lit in enumerate(options):
            if lit is not None:
                model.AddHint(lit, int(choice[p] == o))
    for k, (s, e) in enumerate(zip(starts, ends)):
        model.AddHint(s, s_hint[k])
        model.AddHint(e, e_hint[k])


def deterministic_solver(seed: int, time_limit: float, work_limit: float):
    """A CP-SAT solver with one seeded search worker, stopped by its deterministic time
    (`work_limit`) or the wall clock (`time_limit`), whichever comes first."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1           # one deterministic search worker
    # CP-SAT's own SIGINT handler would outlive the solve: a later Ctrl-C then kills the process
    # (exit 130) instead of raising KeyboardInterrupt, and an interrupted training run loses its save
    solver.parameters.catch_sigint_signal = False
    solver.parameters.random_seed = int(seed)
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.max_deterministic_time = float(work_limit)
    return solver


def solve(problem: Problem, caps: list[int | None], hint: list[int] | None, *, time_limit: float,
          work_limit: float, seed: int = 0) -> Solution:
    """Place and order `problem`'s tasks with CP-SAT, minimising the makespan (ticks)."""
    from ortools.sat.python import cp_model

    D, P = len(problem.devices), len(problem.parts)
    dur = problem.duration
    allowed = problem.allowed()
    hint_schedule = problem.schedule(hint) if hint is not None else None
    hint_fits = hint is not None and problem_fits(problem, hint, caps)
    if hint_fits:   # only placements faster than the hint are of interest
        horizon = hint_schedule[2]
    else:   # at least any list schedule's (the hint's too)
        longest = [int(dur[k][allowed[p]].max(initial=0)) for k, (p, _) in enumerate(problem.tasks)]
        horizon = sum(longest) + sum(int(problem.delay(e).max(initial=0)) for e in problem.edges)
    model = cp_model.CpModel()
    x = [[model.NewBoolVar(f"x{p}_{d}") if allowed[p, d] else None for d in range(D)] for p in range(P)]
    for p in range(P):
        model.AddExactlyOne([v for v in x[p] if v is not None])
    on = [[d] for d in range(D)]
    starts, ends = add_tasks(model, problem.tasks, x, dur, on, horizon)
    add_copies(model, problem, x, starts, ends, problem.delay)
    makespan = model.NewIntVar(0, horizon, "makespan")
    model.AddMaxEquality(makespan, ends)
    add_load_bounds(model, problem.tasks, x, dur, on, makespan)
    shared_on = add_memory_caps(model, problem, x, on, caps)
    model.Minimize(makespan)
    if hint is not None:
        s_hint, e_hint, m_hint = hint_schedule
        add_hints(model, x, hint, starts, ends, s_hint, e_hint)
        model.AddHint(makespan, m_hint)
        for w, d, parts in shared_on:
            model.AddHint(w, int(any(hint[p] == d for p in parts)))

    solver = deterministic_solver(seed, time_limit, work_limit)
    began = time.perf_counter()
    code = solver.Solve(model)
    wall = time.perf_counter() - began
    status = solver.StatusName(code)
    hint_objective = hint_schedule[2] if hint_schedule is not None else None
    stopped_by = None
    if code not in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        stopped_by = "wall clock" if solver.deterministic_time < work_limit * 0.999 else "deterministic time"
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        placed = [next(d for d in range(D) if x[p][d] is not None and solver.Value(x[p][d])) for p in range(P)]
        objective, bound = int(round(solver.ObjectiveValue())), int(math.floor(solver.BestObjectiveBound() + 1e-9))
        if hint_objective is not None and objective > hint_objective:   # the hint is faster (outside the model)
            return Solution(list(hint), status, hint_objective, None, hint_objective, "hint", hint_fits, stopped_by,
                            wall, solver.deterministic_time)
        return Solution(placed, status, objective, min(bound, objective), hint_objective, "solver", hint_fits,
                        stopped_by, wall, solver.deterministic_time)
    bound = int(math.floor(solver.BestObjectiveBound() + 1e-9)) if code == cp_model.UNKNOWN else None
    if hint is not None:   # nothing found in time, or nothing within the memory bound: the hint stands
        return Solution(list(hint), status, hint_objective, bound if hint_fits else None, hint_objective, "hint",
                        hint_fits, stopped_by, wall, solver.deterministic_time)
    return Solution([], status, None, bound, None, "none", False, stopped_by, wall, solver.deterministic_time)


def problem_fits(problem: Problem, part_device: list[int], caps: list[int | None]) -> bool:
    """Whether `part_device` is within the caps in the model's memory bound."""
    memory = problem.part_memory(part_device)
    return all(cap is None or m <= cap for m, cap in zip(memory, caps))


def model_parts(graph: OpGraph, groups: int, hint_nodes: dict[str, str] | None) -> list[list[str]]:
    """The model's parts: one per node on graphs of at most `groups` nodes, else `acyclic_groups`,
    in topological order of their first node."""
    if len(graph.nodes) <= groups:
        return [[n] for n in group_graph(graph, method="nodes").node_group]
    position = {n: i for i, n in enumerate(graph.nodes)}
    parts = [sorted(m, key=position.__getitem__) for m in acyclic_groups(graph, groups, hint_nodes)]
    return sorted(parts, key=lambda m: position[m[0]])


def _project(graph: OpGraph, parts: list[list[str]], nodes: dict[str, str], devices: list[str]) -> list[int]:
    """Each part's device under a node placement: the device of most of its cost (`node_cost`)."""
    index = {d: i for i, d in enumerate(devices)}
    out = []
    for members in parts:
        load = [0.0] * len(devices)
        for n in members:
            load[index[nodes[n]]] += node_cost(graph.nodes[n])
        out.append(int(np.argmax(load)))
    return out


# The last model built (local search's exact start, then the exact row: the same graph, cost model,
# devices, caps and hint), and its solve where that was stopped by its work, not the wall clock (so
# deterministic), for a caller whose wall clock it fits in (its record then gives that solve's seconds)
_last_solve = LastCall()


def _solved(graph: OpGraph, devices: list[str], cost: CostModel, caps: dict, groups: int,
            hint_nodes: dict[str, str] | None, seed: int, time_limit: float, work_limit: float):
    """The model's parts, the problem, the hint projected on the parts and the solver's solution
    (a copy: `exact` amends it), the last call's where they are the same (the solution where it
    fits in `time_limit`)."""
    key = (tuple(devices), tuple(sorted(caps.items())), groups, seed, work_limit,
           None if hint_nodes is None else tuple(hint_nodes[n] for n in graph.nodes))
    kept = _last_solve.get(key, graph, cost)
    if kept is not None:
        parts, problem, hint = kept["model"]
        solution = kept.get("solution")
        if solution is not None and solution.wall_s <= time_limit:
            return parts, problem, hint, replace(solution)
    else:
        parts = model_parts(graph, groups, hint_nodes)
        problem = build_problem(graph, devices, cost, parts)
        hint = _project(graph, parts, hint_nodes, devices) if hint_nodes is not None else None
        if hint is not None:
            seconds = problem.schedule(hint, seconds=True)[2]
            problem.unit = seconds / TICKS if seconds > 0 else 1.0
        else:
            longest = np.where(np.isfinite(problem.seconds), problem.seconds, 0.0).max(axis=1).sum()
            delays = sum(float(s.max(initial=0.0)) for s in problem.pair_seconds.values())
            problem.unit = (longest + delays) / (5 * TICKS) if longest + delays > 0 else 1.0
        kept = {"model": (parts, problem, hint)}
        _last_solve.keep(kept, key, graph, cost)
    solution = solve(problem, [caps.get(d) for d in devices], hint, time_limit=time_limit, work_limit=work_limit,
                     seed=seed)
    if solution.stopped_by != "wall clock":
        kept["solution"] = replace(solution)
    return parts, problem, hint, solution


def default_work_limit(time_limit: float = TIME_LIMIT) -> float:
    """CP-SAT's deterministic time limit that goes with a wall-clock `time_limit`."""
    return time_limit * WORK_PER_SECOND


def exact(graph: OpGraph, devices: list[str], cost: CostModel | None = None, caps: Caps | None = None, *,
          seed: int = 0, time_limit: float = TIME_LIMIT, work_limit: float | None = None,
          groups: int = GROUPS, start: Start | None = None) -> Placement:
    """The CP-SAT placement of coarsened groups minimising the model's makespan within `time_limit`,
    warm-started with the best list heuristic; records the status, objective, bound and gap.
    `work_limit`: CP-SAT's deterministic time limit (default `WORK_PER_SECOND` x `time_limit`).
    `start`: the best list heuristic as `best_start` scored it (local search passes its own, so
    that the heuristics are not placed and simulated twice; its `assign` None: none fits, so no
    hint); None: scored here."""
    require_devices(devices)
    cost = require_cost(cost, "exact")
    if time_limit <= 0:
        raise PlacerError(f"exact needs a positive --time-limit, not {time_limit}")
    if groups < 1:
        raise PlacerError(f"exact needs at least 1 group, not {groups}")
    caps = dict(caps or {})
    sim = make_simulator(graph, devices, cost, caps)
    start = start if start is not None else best_start(graph, devices, cost, caps, sim, seed=seed)
    hint_nodes = ({n: devices[int(k)] for n, k in zip(graph.nodes, start.assign)}
                  if start.assign is not None else None)
    work_limit = default_work_limit(time_limit) if work_limit is None else work_limit
    parts, problem, hint, solution = _solved(graph, devices, cost, caps, groups, hint_nodes, seed, time_limit,
                                             work_limit)
    training = training_of(cost)
    if not solution.part_device:
        if caps:
            raise does_not_fit("exact", graph, caps, cost=cost)
        raise PlacerError(f"exact: no placement can run on {', '.join(devices)}: some op runs on none of them")
    if solution.used == "hint":
        nodes = hint_nodes   # the heuristic's own placement, not its projection on the groups
    else:
        nodes = {n: devices[d] for members, d in zip(parts, solution.part_device) for n in members}
        if caps and over_caps(graph, Placement(list(devices), nodes), caps, training):
            if hint_nodes is None:
                raise does_not_fit("exact", graph, caps, cost=cost)
            nodes, solution.used = hint_nodes, "hint"
            solution.objective = solution.hint_objective
            solution.bound = solution.bound if solution.hint_fits else None
    simulated = sim.simulate([devices.index(nodes[n]) for n in graph.nodes])   # for the record: compare's figure
    # what the solver proved, whatever is returned: its best makespan in the model, and that placement simulated
    solver_objective = solution.objective if solution.used == "solver" else None
    solver_step_time = simulated.step_time if solution.used == "solver" and simulated.failure is None else None
    if solution.used == "solver" and hint_nodes is not None and \
            (simulated.failure is not None or simulated.step_time > start.step_time):
        # best among the model's coarse groups, slower in the simulator (which orders the steps as
        # the engine does): the heuristic it was hinted with stands, and the gap is the model's for it
        nodes, solution.used, solution.objective = hint_nodes, "hint", solution.hint_objective
        solution.bound = solution.bound if solution.hint_fits else None
        simulated = sim.simulate([devices.index(nodes[n]) for n in graph.nodes])
    unit = float(problem.unit)
    objective = solution.objective * unit if solution.objective is not None else None
    bound = solution.bound * unit if solution.bound is not None else None
    gap = None
    if solution.objective is not None and solution.bound is not None:
        gap = (solution.objective - solution.bound) / solution.objective if solution.objective > 0 else 0.0
    hint_exact = hint is not None and all(len({hint_nodes[n] for n in members}) == 1 for members in parts)
    hint_objective = solution.hint_objective * unit if solution.hint_objective is not None else None
    return make_placement(graph, devices, nodes, "exact", seed=seed, time_limit=time_limit, work_limit=work_limit,
                          workers=1, groups=len(parts), tasks=len(problem.tasks), status=solution.status,
                          objective=objective, bound=bound, gap=gap, used=solution.used, hint=start.name,
                          hint_exact=hint_exact, hint_in_model=solution.hint_fits,
                          hint_objective=hint_objective, solver_step_time=solver_step_time,
                          solver_objective=solver_objective * unit if solver_objective is not None else None,
                          simulated_step_time=simulated.step_time if simulated.failure is None else None,
                          hint_step_time=start.step_time if start.assign is not None else None,
                          stopped_by=solution.stopped_by, solve_s=round(solution.wall_s, 3),
                          deterministic_time=round(solution.deterministic_time, 3), tick_s=unit)
