"""A lower bound on the step time of a graph on a device set: the physical limit.

No placement can beat either of:
- the critical path: the longest dependency chain with every node at its fastest device and
  no transfers (for a training step: through the forward, loss, backward and update steps);
- the load bound: all work must be done by the devices together. As an LP (scipy's HiGHS):
  min T such that each node is split fractionally over devices and no device's share of work
  exceeds T. Without scipy, the plain bound sum(fastest time) / devices (never larger).
  Under contention (a cost model with `slowdown`, `placer.costmodel.contention`: device d runs
  slowdown[d] times slower while another device is busy) the LP also splits the step into each
  device's solo seconds u_d and the shared seconds C: u_1 + ... + u_D + C <= T, and device d's
  load <= u_d + C / slowdown[d]. Every simulated schedule is a point of that LP, so the simulator
  never predicts a step below the bound.

A pipelined step (M micro-batches, `placer.program.pipeline`) is bounded over its unrolled
program: the load is every micro-batch's work (M times one's, plus the updates), the critical
path one micro-batch's (with the gradient sums after it), and the fill and drain: a node's M
micro-batches run one after another on its device, which cannot start before the first can
(the longest path to it) nor end before the path after it, so no step beats
head + M x its time + tail for any node.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass

import numpy as np

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.program.pipeline import Pipeline
from placer.costmodel.sim_program import SimProgram, inference_program, pipelined_program, training_program
from placer.program.training import TrainingSpec

log = logging.getLogger(__name__)


@dataclass
class LowerBound:
    """Seconds: `value` is the larger of the critical path and the load bound."""

    value: float
    critical_path: float
    load: float          # the LP load bound (or the plain one when scipy is missing)
    load_method: str     # "lp" or "average"
    fill_drain: float = 0.0   # a pipelined step's: the longest of head + a node's M runs + tail

    def to_dict(self) -> dict[str, float | str]:
        return asdict(self)


def _times(graph: OpGraph, devices: list[str], cost: CostModel) -> np.ndarray:
    times = np.array([[cost.op_time(node, d) for d in devices] for node in graph.nodes.values()], dtype=float)
    _check_runnable(graph, devices, times)
    return times


def _check_runnable(graph: OpGraph, devices: list[str], times: np.ndarray) -> None:
    stuck = [n for n, row in zip(graph.nodes, times) if not np.isfinite(row).any()]
    if stuck:
        raise PlacerError(f"node {stuck[0]!r} can run on none of {devices}; add a device that supports it")


def critical_path(graph: OpGraph, fastest: dict[str, float]) -> float:
    """Longest path through the DAG weighting each node by `fastest[node]`, transfers free."""
    done: dict[str, float] = {}
    for name in graph.nodes:  # topological order
        before = max((done[p] for p in graph.dag.predecessors(name)), default=0.0)
        done[name] = before + fastest[name]
    return max(done.values(), default=0.0)


def load_bound_lp(times: np.ndarray, slowdown: list[float] | None = None) -> float:
    """min T s.t. sum_d x[n,d] = 1, sum_n x[n,d] t[n,d] <= T, x >= 0 (x on finite times only);
    with `slowdown` (a factor >= 1 per device), the contended form in the module's docstring."""
    if slowdown is not None and any(s > 1.0 for s in slowdown):
        return _contended_load_lp(times, slowdown)
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    n_nodes, n_dev = times.shape
    cells = [(i, d) for i in range(n_nodes) for d in range(n_dev) if math.isfinite(times[i, d])]
    n_var = len(cells) + 1  # the x cells, then T
    c = np.zeros(n_var)
    c[-1] = 1.0
    eq_rows, eq_cols = zip(*[(i, k) for k, (i, _) in enumerate(cells)])
    a_eq = coo_matrix((np.ones(len(cells)), (eq_rows, eq_cols)), shape=(n_nodes, n_var))
    ub_rows = [d for _, d in cells] + list(range(n_dev))
    ub_cols = list(range(len(cells))) + [n_var - 1] * n_dev
    ub_vals = [times[i, d] for i, d in cells] + [-1.0] * n_dev
    a_ub = coo_matrix((ub_vals, (ub_rows, ub_cols)), shape=(n_dev, n_var))
    result = linprog(c, A_ub=a_ub.tocsr(), b_ub=np.zeros(n_dev), A_eq=a_eq.tocsr(), b_eq=np.ones(n_nodes),
                     bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(f"load-bound LP failed: {result.message}")
    return float(result.fun)


def _contended_load_lp(times: np.ndarray, slowdown: list[float]) -> float:
    """min T over x (the split of each node), u_d (device d's solo seconds) and C (shared seconds):
    sum_d x[n,d] = 1; load_d - u_d - C / slowdown[d] <= 0; sum_d u_d + C - T <= 0."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    n_nodes, n_dev = times.shape
    cells = [(i, d) for i in range(n_nodes) for d in range(n_dev) if math.isfinite(times[i, d])]
    k = len(cells)
    n_var = k + n_dev + 2   # x cells, u_0..u_{D-1}, C, T
    c_var, t_var = k + n_dev, k + n_dev + 1
    c = np.zeros(n_var)
    c[t_var] = 1.0
    eq_rows, eq_cols = zip(*[(i, j) for j, (i, _) in enumerate(cells)])
    a_eq = coo_matrix((np.ones(k), (eq_rows, eq_cols)), shape=(n_nodes, n_var))
    rows = [d for _, d in cells] + list(range(n_dev)) + list(range(n_dev)) + [n_dev] * (n_dev + 2)
    cols = list(range(k)) + [k + d for d in range(n_dev)] + [c_var] * n_dev + \
        [k + d for d in range(n_dev)] + [c_var, t_var]
    vals = [times[i, d] for i, d in cells] + [-1.0] * n_dev + [-1.0 / s for s in slowdown] + \
        [1.0] * (n_dev + 1) + [-1.0]
    a_ub = coo_matrix((vals, (rows, cols)), shape=(n_dev + 1, n_var))
    result = linprog(c, A_ub=a_ub.tocsr(), b_ub=np.zeros(n_dev + 1), A_eq=a_eq.tocsr(), b_eq=np.ones(n_nodes),
                     bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(f"contended load-bound LP failed: {result.message}")
    return float(result.fun)


def program_critical_path(program: SimProgram, fastest: list[float]) -> float:
    """Longest dependency chain through a simulated program's steps, each at `fastest[step]`."""
    producer: dict[str, int] = {}
    done: list[float] = []
    for i, step in enumerate(program.steps):  # a valid order
        before = max((done[producer[t]] for t in step.inputs if t in producer), default=0.0)
        done.append(before + fastest[i])
        producer.update((t, i) for t in step.outputs if t)
    return max(done, default=0.0)


def fill_drain(program: SimProgram, step_times: np.ndarray, n_nodes: int) -> float:
    """max over nodes of: the longest path to any of its steps + its steps' time on its best
    device (they share it) + the shortest of the longest paths after them; steps at their fastest."""
    fastest = step_times.min(axis=1)
    producer: dict[str, int] = {}
    head = np.zeros(len(program.steps))
    consumers: list[list[int]] = [[] for _ in program.steps]
    for i, step in enumerate(program.steps):   # a valid order
        before = {producer[t] for t in step.inputs if t in producer}
        head[i] = max((head[j] + fastest[j] for j in before), default=0.0)
        for j in before:
            consumers[j].append(i)
        producer.update((t, i) for t in step.outputs if t)
    tail = np.zeros(len(program.steps))
    for i in reversed(range(len(program.steps))):
        tail[i] = max((fastest[j] + tail[j] for j in consumers[i]), default=0.0)
    node = np.asarray(program.node_of)
    serial = np.zeros((n_nodes, step_times.shape[1]))
    np.add.at(serial, node, step_times)
    first = np.full(n_nodes, np.inf)
    last = np.full(n_nodes, np.inf)
    np.minimum.at(first, node, head)
    np.minimum.at(last, node, tail)
    has = np.isfinite(first)
    return float((first[has] + serial[has].min(axis=1) + last[has]).max(initial=0.0))


def lower_bound(graph: OpGraph, devices: list[str], cost: CostModel,
                training: TrainingSpec | None = None, pipeline: Pipeline | None = None) -> LowerBound:
    """max(critical path at fastest devices, load bound) for `graph` on `devices`; with
    `training`, of the whole training step (a node's forward, backward and the updates it owns
    share its device, so its load is their sum); with `pipeline`, of the pipelined step, also
    bounded by its fill and drain."""
    if not devices:
        raise PlacerError("no devices given for the lower bound; give at least one")
    pipelined = pipeline is not None and pipeline.pipelined
    drain = 0.0
    if training is None and not pipelined:
        times = _times(graph, devices, cost)
        fastest_row = np.where(np.isfinite(times), times, np.inf).min(axis=1)
        cp = critical_path(graph, dict(zip(graph.nodes, fastest_row.tolist())))
    else:
        program = (inference_program(graph, devices, cost) if training is None
                   else training_program(graph, devices, cost, training))
        if pipelined:
            program = pipelined_program(program, pipeline, set(graph.initializers))
        step_times = np.asarray(program.times, dtype=float)
        times = np.zeros((len(graph.nodes), len(devices)))
        np.add.at(times, np.asarray(program.node_of), step_times)
        _check_runnable(graph, devices, times)
        cp = program_critical_path(program, step_times.min(axis=1).tolist())
        fastest_row = times.min(axis=1)
        if pipelined:
            drain = fill_drain(program, step_times, len(graph.nodes))
    average = float(fastest_row.sum()) / len(devices)
    slowdown = getattr(cost, "slowdown", None) or {}
    try:
        load, method = max(load_bound_lp(times, [float(slowdown.get(d, 1.0)) for d in devices]), average), "lp"
    except ImportError:
        load, method = average, "average"
    log.info("lower bound: critical path %.6f s, load %.6f s (%s), fill and drain %.6f s", cp, load, method, drain)
    return LowerBound(value=max(cp, load, drain), critical_path=cp, load=load, load_method=method, fill_drain=drain)


def check_bound(bound: LowerBound | float, measured: dict[str, float | None], tolerance: float = 0.0) -> str | None:
    """One line when a measured step time (name -> seconds) is below the lower bound by more than
    `tolerance` (a fraction): the profile the bound came from is stale. None when every one is above."""
    value = bound.value if isinstance(bound, LowerBound) else float(bound)
    below = {n: t for n, t in measured.items() if t is not None and t < value * (1.0 - tolerance)}
    if not below:
        return None
    name = min(below, key=below.get)
    return (f"{name} measured {below[name] * 1e3:.2f} ms, below the lower bound of {value * 1e3:.2f} ms "
            f"({len(below)} of {sum(t is not None for t in measured.values())} below it): the profile is stale; retake it (--refresh-profile)")
