"""Local search: first-improvement moves from the best baseline, within a sample budget.

The yardstick a learner must beat at the same number of simulated placements (`samples`, the same
meaning as random search's: every placement the simulator scores counts, the starting candidates
included). It starts from the fastest in the simulator of the baselines (m-ETF, m-SCT, HEFT, the expert,
every single device and the exact CP-SAT solver, `placer.placers.exact`, hinted with the best of
the others; on a pipelined step the pipeline partitioners too, and not the solver, which has no
pipelined model) that fits the caps, so it is never slower than any of them (the solver is left
out where the others use the whole budget). The solver's placement costs one sample where it is
none of the others'; its seconds (a few: the `exact` row's default deterministic work) cost none.
That work stops it, and the wall clock only after 600 s (a safety net), so that local search stays
reproducible on a loaded machine, where the `exact` row (stopped by whichever comes first, 10 s
by default) may stop sooner. `exact_start=False` leaves the solver out. Then it moves

1. whole groups (`placer.graph.grouping.group_graph`, at most `groups`, default 64) to another
   device, then, when no group move helps,
2. single nodes,

and goes back to group moves whenever a node move helped, until neither helps (a local optimum)
or the budget is spent. Candidate moves (unit, device) are scanned in a seeded shuffled order,
`CHUNK` at a time (`LARGE_CHUNK` on a large graph), each chunk simulated in one `simulate_batch`
call; the fastest move of a chunk that lowers the simulated step time and fits the caps (the
simulator's and the executor's memory check) is taken, and the scan goes on after the chunk. A
neighbourhood is at its local optimum once every one of its moves has been scanned since the last
improvement.

On the training objective (`cost` a `TrainingStepCosts`) the moves are scored on the simulated
training step (backward, gradients and optimizer state included), with `pipeline` on the
pipelined step, as random search does. Deterministic for a seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placer.errors import PlacerError
from placer.graph.grouping import group_graph
from placer.graph.opgraph import OpGraph
from placer.interrupts import deferred_interrupt
from placer.costmodel.protocol import CostModel
from placer.costmodel.batch_simulator import simulate_batch
from placer.costmodel.simulator import Simulator
from placer.placement import Placement
from placer.placers.base import (Caps, does_not_fit, make_placement, make_simulator, over_caps, require_cost,
                                 require_devices, training_of)
from placer.placers.exact import default_work_limit, exact
from placer.placers.starts import Start, best_start, fastest

# candidate moves simulated per batch: a small batch takes an improving move sooner, so the budget
# buys more moves (the 14 held-out problems of benchmarks/generalisation.py, simulated: 4 against 64
# never slower, 0.65% faster on average at 500 samples and 1.1% at 2000, up to 5% on YOLO)
CHUNK = 4
# On a large graph a batch costs its walk's numpy calls per step, whatever its rows: on the
# 10,000-node Llama-2-7B shape (8xh100-nvlink) a batch of 4 placements took 0.45 s and one of 32
# 0.90 s (113 -> 28 ms a placement), so there local search takes its moves 32 at a time
LARGE_GRAPH = 2000   # nodes
LARGE_CHUNK = 32
GROUPS = 64         # the most groups moved whole
EXACT_WALL_LIMIT = 600.0   # seconds: only a safety net for the solver's start (its work limit stops it first)
# A move must lower the step time by more than this share of it: float noise is no improvement.
MIN_GAIN = 1e-9


def chunk_for(graph: OpGraph) -> int:
    """Moves simulated per batch on `graph`: `CHUNK`, or `LARGE_CHUNK` from `LARGE_GRAPH` nodes."""
    return LARGE_CHUNK if len(graph.nodes) >= LARGE_GRAPH else CHUNK


def _with_exact(graph: OpGraph, devices: list[str], cost: CostModel, caps: Caps | None, sim: Simulator, seed: int,
                start: Start) -> tuple[Start, dict]:
    """`start`, or the exact solver's placement (hinted with `start`) where it simulates faster and
    fits: one sample more, none where it is one of the placements `start` scored already; and what
    the solver did."""
    try:
        # stopped by its deterministic work (the `exact` baseline's default amount), not by a wall
        # clock that a loaded machine reaches first: local search stays reproducible
        solved = exact(graph, devices, cost, caps, seed=seed, start=start, time_limit=EXACT_WALL_LIMIT,
                       work_limit=default_work_limit())
    except PlacerError as exc:
        start.candidates["exact"] = None
        return start, {"failure": str(exc)}
    # what the solver did (no seconds: the record is reproducible); used "hint": it kept the heuristic's
    info = {k: solved.extra["placer"].get(k) for k in ("status", "gap", "used", "stopped_by")}
    row = tuple(devices.index(solved.nodes[n]) for n in graph.nodes)
    if row in start.scored:   # the solver kept a heuristic's placement: scored already, under its name
        start.candidates["exact"] = start.candidates.get(start.scored[row])
        return start, info
    scored = fastest(graph, devices, caps, sim, cost, ["exact"], [list(row)], {}, None)
    start.candidates["exact"] = scored.candidates["exact"]
    start.scored[row] = "exact"
    start.simulated += 1
    if scored.assign is not None and scored.step_time < start.step_time:
        start.name, start.assign, start.step_time = "exact", scored.assign, scored.step_time
    return start, info


def _descend(search: "_Search", group_units: list[np.ndarray]) -> tuple[int, bool]:
    """Moves of `group_units`, then of single nodes, again until neither helps or the budget is
    spent: the rounds scanned, and whether a local optimum was reached. A search restored from
    `_Search.state` goes on inside the scan it was cut in."""
    node_units = [np.asarray([i], dtype=np.int64) for i in range(len(search.graph.nodes))]
    while search.spent < search.budget:
        if search.scan is None:   # a round: every group move, then every node move
            search.rounds += 1
            search.begin("group", len(group_units))
        if search.scan.kind == "group":
            search.neighbourhood(group_units)
            search.begin("node", len(node_units))
        improved = search.neighbourhood(node_units)
        search.scan = None
        if search.spent >= search.budget:
            break
        if not improved:   # every group move and every node move scanned, none helps
            return search.rounds, True
    return search.rounds, False


@dataclass
class Improved:
    """What `improve` did: the assignment it ends at, its simulated step time, the placements it
    simulated, the moves it took, whether it stopped at a local optimum, and after how many
    placements each move was taken (with the step time it reached)."""

    assign: np.ndarray
    step_time: float
    simulated: int
    group_moves: int
    node_moves: int
    local_optimum: bool
    curve: list[tuple[int, float]]


def improve(graph: OpGraph, devices: list[str], sim: Simulator, caps: Caps | None, assign: np.ndarray,
            step_time: float, samples: int, groups: list[np.ndarray], *, seed: int = 0, chunk: int = CHUNK,
            training=None) -> Improved:
    """Local search's moves from a given assignment (device index per node, simulating at
    `step_time`) over the caller's `groups` (node indices each), then single nodes, within `samples`
    simulated placements; `chunk` moves simulated per batch, the fastest improving one taken (from
    the graph policy's placement, on its own groups, 4 reached 1.0003x of 64-move local search's
    500-sample result in 250 samples where 64 reached 1.013x: the 14 held-out problems of
    benchmarks/generalisation.py, simulated)."""
    search = _Search(graph, devices, sim, caps, training, np.asarray(assign, dtype=np.int64).copy(), float(step_time),
                     samples, np.random.default_rng(seed), chunk=chunk)
    _, local_optimum = _descend(search, groups)
    return Improved(search.assign, search.step_time, search.spent, search.moves["group"], search.moves["node"],
                    local_optimum, search.curve)


@dataclass
class _Scan:
    """Where a neighbourhood's scan stands: its shuffled moves, the next one, how many were scanned
    since the last improvement, and whether one helped."""

    kind: str             # "group" or "node"
    pairs: np.ndarray     # (unit, device) moves as unit * devices + device, in scan order
    pos: int = 0
    since: int = 0
    improved: bool = False


class SearchInterrupted(KeyboardInterrupt):
    """Ctrl-C inside local search's moves: `state` continues it exactly (`local_search(resume=...)`)."""

    def __init__(self, state: dict) -> None:
        super().__init__()
        self.state = state


class _Search:
    """The search state: the current assignment, its step time, and the budget left."""

    def __init__(self, graph: OpGraph, devices: list[str], sim: Simulator, caps: Caps | None,
                 training, assign: np.ndarray, step_time: float, budget: int, rng: np.random.Generator,
                 chunk: int = CHUNK) -> None:
        self.graph, self.devices, self.sim, self.caps, self.training = graph, devices, sim, caps, training
        self.assign, self.step_time, self.budget, self.rng, self.chunk = assign, step_time, budget, rng, chunk
        self.spent = 0
        self.rounds = 0
        self.scan: _Scan | None = None
        self.moves = {"group": 0, "node": 0}
        self.curve: list[tuple[int, float]] = []   # (placements simulated, step time) after each move taken
        # runnable[node, device]: every step of the node can run there (an INVALID move is not tried)
        times = np.asarray(sim.op_time, dtype=float).reshape(len(sim.op_time), len(devices))
        runnable = np.ones((len(graph.nodes), len(devices)), dtype=bool)
        np.logical_and.at(runnable, np.asarray(sim.step_node), np.isfinite(times))
        self.runnable = runnable

    def state(self) -> dict:
        """Everything the search goes on from, as plain data (`restore`)."""
        scan = None if self.scan is None else {k: getattr(self.scan, k) for k in _Scan.__dataclass_fields__}
        return {"assign": self.assign.copy(), "step_time": self.step_time, "spent": self.spent,
                "rounds": self.rounds, "scan": scan, "moves": dict(self.moves), "curve": list(self.curve),
                "rng": self.rng.bit_generator.state}

    def restore(self, state: dict) -> None:
        self.assign, self.step_time = np.asarray(state["assign"], dtype=np.int64).copy(), state["step_time"]
        self.spent, self.rounds = state["spent"], state["rounds"]
        self.scan = _Scan(**state["scan"]) if state["scan"] is not None else None
        self.moves, self.curve = dict(state["moves"]), list(state["curve"])
        self.rng.bit_generator.state = state["rng"]

    def fits(self, assign: np.ndarray) -> bool:
        """The executor's memory check (the simulator's was passed already)."""
        if not self.caps:
            return True
        nodes = {n: self.devices[int(k)] for n, k in zip(self.graph.nodes, assign)}
        return not over_caps(self.graph, Placement(list(self.devices), nodes), self.caps, self.training)

    def begin(self, kind: str, units: int) -> None:
        """A new scan of moving each of `units` units to each device, in a seeded shuffled order."""
        self.scan = _Scan(kind, self.rng.permutation(units * len(self.devices)))

    def neighbourhood(self, units: list[np.ndarray]) -> bool:
        """First-improvement over moving each unit (node indices) to each device, from where the
        scan stands; True if any move of the scan helped. The scan moves on only once a batch is
        simulated, so that a Ctrl-C during one leaves the state before it."""
        scan, D = self.scan, len(self.devices)
        while scan.since < len(scan.pairs) and self.spent < self.budget:
            batch: list[tuple[int, int]] = []
            pos, since = scan.pos, scan.since
            while since < len(scan.pairs) and len(batch) < min(self.chunk, self.budget - self.spent):
                u, d = divmod(int(scan.pairs[pos]), D)
                pos = (pos + 1) % len(scan.pairs)
                since += 1
                nodes = units[u]
                if (self.assign[nodes] == d).all() or not self.runnable[nodes, d].all():
                    continue
                batch.append((u, d))
            if not batch:
                scan.pos, scan.since = pos, since
                break
            rows = np.repeat(self.assign[None, :], len(batch), axis=0)
            for r, (u, d) in enumerate(batch):
                rows[r, units[u]] = d
            result = simulate_batch(self.sim, rows, peaks=False)
            with deferred_interrupt():
                scan.pos, scan.since = pos, since
                self.spent += len(batch)
                self._take_fastest(rows, result, scan)
        return scan.improved

    def _take_fastest(self, rows: np.ndarray, result, scan: _Scan) -> None:
        times = np.where([f is None for f in result.failure], result.step_time, np.inf)
        for r in np.argsort(times, kind="stable"):
            if not times[r] < self.step_time * (1 - MIN_GAIN):
                break
            if self.fits(rows[r]):
                self.assign, self.step_time = rows[r].copy(), float(times[r])
                self.moves[scan.kind] += 1
                self.curve.append((self.spent, self.step_time))
                scan.since, scan.improved = 0, True
                break


def local_search(graph: OpGraph, devices: list[str], cost: CostModel | None = None, caps: Caps | None = None,
                 *, seed: int = 0, samples: int = 2000, groups: int = GROUPS, pipeline=None,
                 start: Placement | None = None, exact_start: bool = True, resume: dict | None = None) -> Placement:
    """First-improvement local search from the best baseline in the simulator (the list heuristics,
    the single devices and, with `exact_start`, the exact solver; or from `start`: a learned
    placement polished), group moves, then node moves, within `samples` simulated placements (the
    starting candidates count). Ctrl-C during the moves raises `SearchInterrupted`, whose state
    given back as `resume` (with the same arguments) goes on to the placement an uncut run gives."""
    require_devices(devices)
    cost = require_cost(cost, "local_search")
    if samples < 1:
        raise PlacerError(f"local_search needs at least 1 sample, not {samples}")
    if groups < 1:
        raise PlacerError(f"local_search needs at least 1 group, not {groups}")
    sim = make_simulator(graph, devices, cost, caps, pipeline)
    if resume is not None:
        start, solver = Start(**resume["start"]), resume["solver"]
    else:
        start, solver = _starting_point(graph, devices, cost, caps, sim, seed, samples, pipeline, start, exact_start)
    grouping = group_graph(graph, min(groups, len(graph.nodes)), len(devices))
    position = {n: i for i, n in enumerate(graph.nodes)}
    group_units = [np.asarray([position[n] for n in members], dtype=np.int64) for members in grouping.groups]
    search = _Search(graph, devices, sim, caps, training_of(cost), start.assign.copy(), start.step_time,
                     samples - start.simulated, np.random.default_rng(seed), chunk=chunk_for(graph))
    if resume is not None:
        search.restore(resume["search"])
    try:
        rounds, local_optimum = _descend(search, group_units)
    except KeyboardInterrupt:
        kept = {"name": start.name, "assign": start.assign, "step_time": start.step_time,
                "candidates": start.candidates, "simulated": start.simulated}
        raise SearchInterrupted({"start": kept, "solver": solver, "search": search.state()}) from None
    nodes = {n: devices[int(k)] for n, k in zip(graph.nodes, search.assign)}
    return make_placement(graph, devices, nodes, "local_search", seed=seed, samples=samples,
                          simulated=start.simulated + search.spent, groups=len(grouping), start=start.name,
                          start_step_time=start.step_time, simulated_step_time=search.step_time,
                          group_moves=search.moves["group"], node_moves=search.moves["node"], rounds=rounds,
                          local_optimum=local_optimum, candidates=start.candidates, exact_start=solver)


def _starting_point(graph: OpGraph, devices: list[str], cost: CostModel, caps: Caps | None, sim: Simulator,
                    seed: int, samples: int, pipeline, given: Placement | None,
                    exact_start: bool) -> tuple[Start, dict | None]:
    """Where the moves start (`local_search`'s docstring) and what the exact solver did, if it ran."""
    start = best_start(graph, devices, cost, caps, sim, seed=seed, limit=samples, pipeline=pipeline, given=given)
    solver = None
    if exact_start and given is None and not (pipeline is not None and pipeline.pipelined) and \
            start.simulated < samples:
        start, solver = _with_exact(graph, devices, cost, caps, sim, seed, start)
    if start.assign is None:
        if caps:
            raise does_not_fit("local_search", graph, dict(caps), cost=cost)
        raise PlacerError(f"local_search: no starting placement can run on {', '.join(devices)}: each puts some op "
                          "on a device that cannot run it")
    return start, solver
