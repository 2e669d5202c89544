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

Transfers (`transfer_path`): the critical path above lets every node take its fastest device and
pays no copy, and lets parallel branches run at once on that one device. The transfer path chooses
a device per step and pays what the choice implies. Over the simulator's own program (its steps,
the tensors each reads, the copy times and routes, `Simulator`), in a valid order, S[i][d] bounds
when step i can start on device d and F[i][d] = S[i][d] + t[i][d] when it can finish there:

    S[i][d] = min over the subsets P of i's producers on other nodes (those placed on d too) of
              the largest of:
      (a) F[j][d] for j in P and for i's own node's producers (they run on d: one node, one device);
      (b) R[j][d] = min over d' != d of F[j][d'] + copy(j->i, d'->d), for the producers not in P;
      (c) min S[j][d] + sum t[j][d] over P and the own producers: d runs them one at a time;
      (d) where one link lies on every route into d: min over the producers not in P of
          min_{d' != d} F[j][d'], plus the sum over them of min_{d' != d} copy(j->i, d'->d):
          their copies into d cross that link one at a time.

copy(j->i, d'->d) is the sum of the copy times of the tensors i reads from j when the route d'->d
has links (a link carries one copy at a time, and all of them leave after j ends), else their
largest. Claim: in any simulated placement, a step i on device d starts no earlier than S[i][d].
By induction over the order: take P as the producers the placement puts on d. i starts after
each input has arrived; an input made by j on d arrives when j ends, after F[j][d] (a); made on
d' != d, when j ends (>= F[j][d']) plus the copies over d'->d (b); d runs the steps of P and of
i's node before i, each no earlier than its own S (c); copies into d from j not in P leave after
j ends and take their time on the shared ingress link in turn (d). S[i][d] is the least of these
maxima over every P, so it is below the placement's own. So every step ends after min_d F[i][d],
and the simulated step (the last finish, plus contention's extra, never negative) is at least
max_i min_d F[i][d]. At most `ENUMERATED_PRODUCERS` producers are enumerated; each further one
only adds min(F[j][d], R[j][d]), true whichever side of P it is on. Contention on devices and
links beyond (c) and (d) only delays, so it is left out.

Memory caps (`caps`): a device holds at least every weight, graph input and optimizer state that a
step placed on it reads (the simulator's resident data, `Simulator.r_bytes`), so in a placement
that fits, that resident set stays under the cap. Two consequences that tighten the bounds when the fastest device cannot hold
everything: a node whose own resident bytes exceed a device's cap cannot run there (its time is
infinite in both bounds), and the load LP gets, per capped device d, y[r,d] >= x[n,d] for every
node n reading resident r and sum_r bytes(r) y[r,d] <= cap[d] (a placement is the point with y = 1
where some reader runs on d). When no split fits at all, every placement runs out of memory and the
bound ignores the caps.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass

import numpy as np

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.costmodel.path_energy import path_energy_bound, split_bound
from placer.costmodel.protocol import CostModel
from placer.program.pipeline import Pipeline
from placer.costmodel.sim_program import SimProgram
from placer.costmodel.simulator import Simulator
from placer.program.training import TrainingSpec

log = logging.getLogger(__name__)


@dataclass
class LowerBound:
    """Seconds: `value` is the largest of the critical path, the transfer path, the load bound
    and the fill and drain (of plans: of the split critical path, the load and the path-energy bound)."""

    value: float
    critical_path: float
    load: float          # the LP load bound (or the plain one when scipy is missing)
    load_method: str     # "lp" or "average"
    fill_drain: float = 0.0   # a pipelined step's: the longest of head + a node's M runs + tail
    transfer_path: float = 0.0   # the critical path with each step's device chosen, copies paid
    caps_used: bool = False   # whether memory caps tightened the load bound and the devices a node may take
    path_energy: float = 0.0   # of plans: the chain and the devices' time at once, launches per shard (path_energy.py)

    def to_dict(self) -> dict[str, float | str]:
        return asdict(self)


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


@dataclass
class Residency:
    """What a device must hold while it runs a node: resident data (weights, graph inputs, optimizer
    state), each once on every device running a node that reads it, and each device's cap."""

    nbytes: list[int]            # per resident item
    readers: list[list[int]]     # per resident item: the nodes (indices) reading it
    caps: list[int | None]       # per device: bytes, None where uncapped

    def per_node(self, n_nodes: int) -> np.ndarray:
        """Each node's own resident bytes: what its device holds whatever else runs there."""
        own = np.zeros(n_nodes)
        for nbytes, readers in zip(self.nbytes, self.readers):
            own[readers] += nbytes
        return own


IPM_CELLS = 20_000   # (node, device) pairs above which the load LP is solved by interior point


def load_lp(times: np.ndarray, slowdown: list[float] | None = None,
            memory: Residency | None = None) -> tuple[float, list[float] | None]:
    """min T s.t. sum_d x[n,d] = 1, sum_n x[n,d] t[n,d] <= T, x >= 0 (x on finite times only);
    with `slowdown` (a factor >= 1 per device), the contended form; with `memory`, the caps'
    constraints (both in the module's docstring). Its value (inf when no split fits the caps) and
    the duals of its device rows (how much each device's load holds T up: the path-energy bound's
    device weights; None where the solver gives none)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    n_nodes, n_dev = times.shape
    cells = [(i, d) for i in range(n_nodes) for d in range(n_dev) if math.isfinite(times[i, d])]
    cell = {c: k for k, c in enumerate(cells)}
    contended = slowdown is not None and any(s > 1.0 for s in slowdown)
    n_var = len(cells)
    solo, shared = (list(range(n_var, n_var + n_dev)), n_var + n_dev) if contended else (None, None)
    n_var += n_dev + 1 if contended else 0
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    bounds: list[float] = []

    def row(terms: list[tuple[int, float]], bound: float = 0.0) -> None:
        """One constraint: sum of value x variable over `terms` <= `bound`."""
        for col, val in terms:
            rows.append(len(bounds))
            cols.append(col)
            vals.append(val)
        bounds.append(bound)

    loads = [[(k, times[i, d]) for k, (i, d) in enumerate(cells) if d == dev] for dev in range(n_dev)]
    if memory is not None:
        for dev, cap in enumerate(memory.caps):
            if cap is None:
                continue
            held = []
            for nbytes, readers in zip(memory.nbytes, memory.readers):
                mine = [cell[(n, dev)] for n in readers if (n, dev) in cell]
                if mine:   # y[r,dev] >= x[n,dev] for each reader n; bytes(r) y[r,dev] counts on the cap
                    for k in mine:
                        row([(k, 1.0), (n_var, -1.0)])
                    held.append((n_var, float(nbytes)))
                    n_var += 1
            if held:
                row(held, float(cap))
    t_var = n_var
    n_var += 1
    device_rows = list(range(len(bounds), len(bounds) + n_dev))
    for dev in range(n_dev):
        if contended:   # device dev's load fits in its solo seconds and the shared ones, slowed
            row(loads[dev] + [(solo[dev], -1.0), (shared, -1.0 / slowdown[dev])])
        else:
            row(loads[dev] + [(t_var, -1.0)])
    if contended:
        row([(u, 1.0) for u in solo] + [(shared, 1.0), (t_var, -1.0)])
    c = np.zeros(n_var)
    c[t_var] = 1.0
    a_eq = coo_matrix((np.ones(len(cells)), ([i for i, _ in cells], list(range(len(cells))))),
                      shape=(n_nodes, n_var))
    a_ub = coo_matrix((vals, (rows, cols)), shape=(len(bounds), n_var))
    # HiGHS's dual simplex took 56 s on a 10,000-node Llama over 10 devices, its interior point
    # (with crossover) 14 s, to the same optimum within 1e-14; below IPM_CELLS the simplex stays
    method = "highs-ipm" if len(cells) > IPM_CELLS else "highs"
    result = linprog(c, A_ub=a_ub.tocsr(), b_ub=np.asarray(bounds), A_eq=a_eq.tocsr(), b_eq=np.ones(n_nodes),
                     bounds=(0, None), method=method)
    if result.status == 2 and memory is not None:
        return math.inf, None
    if result.status != 0:
        raise RuntimeError(f"load-bound LP failed: {result.message}")
    marginals = getattr(getattr(result, "ineqlin", None), "marginals", None)
    duals = None if marginals is None else [max(0.0, -float(marginals[r])) for r in device_rows]
    return float(result.fun), duals


def program_critical_path(program: SimProgram, fastest: list[float]) -> float:
    """Longest dependency chain through a simulated program's steps, each at `fastest[step]`."""
    return program.longest_path(fastest)


def fill_drain(program: SimProgram, step_times: np.ndarray, n_nodes: int) -> float:
    """max over nodes of: the longest path to any of its steps + its steps' time on its best
    device (they share it) + the shortest of the longest paths after them; steps at their fastest."""
    fastest = step_times.min(axis=1)
    head = np.zeros(len(program.steps))
    consumers: list[list[int]] = [[] for _ in program.steps]
    for i, before in enumerate(program.predecessors):   # a valid order
        head[i] = max((head[j] + fastest[j] for j in before), default=0.0)
        for j in before:
            consumers[j].append(i)
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


# A step's producers on other nodes whose devices the transfer path enumerates (2^k cases); any
# more are bounded one at a time, which is weaker but as valid.
ENUMERATED_PRODUCERS = 8


def transfer_path(sim: Simulator, step_times: np.ndarray) -> float:
    """max over steps of min over devices of F[step][device]: the critical path with every step's
    device chosen, the copies it implies paid and the producers that share its device run one
    after another (the recurrence and its proof: the module's docstring). `step_times` is steps x
    devices, inf where a step cannot run."""
    D = len(sim.devices)
    tensor_of: dict[str, int] = {}
    for step, tids in zip(sim.steps, sim.out_tensors):
        tensor_of.update(zip(step.outputs, tids))
    copy = np.asarray(sim.t_xfer, dtype=float).reshape(-1, D, D)
    copy[:, np.arange(D), np.arange(D)] = 0.0   # no copy on one device
    queued = np.array([[len(sim.pair_links[s * D + d]) > 0 for d in range(D)] for s in range(D)])
    elsewhere = np.where(np.eye(D, dtype=bool), np.inf, 0.0)   # [from, to]: inf where from == to
    ingress = _ingress(sim)
    node_of = sim.step_node
    start = np.empty((len(sim.steps), D))
    finish = np.empty((len(sim.steps), D))
    for i, step in enumerate(sim.steps):
        by_producer: dict[int, list[int]] = {}
        for t in step.inputs:
            tid = tensor_of[t]
            by_producer.setdefault(sim.t_producer[tid], []).append(tid)
        if any(j >= i for j in by_producer):
            raise PlacerError(f"step {step.name} reads an output of a step after it")
        own = [j for j in by_producer if node_of[j] == node_of[i]]   # one node's steps share its device
        others = sorted((j for j in by_producer if node_of[j] != node_of[i]), key=lambda j: -finish[j].min())
        # per other producer and device d: its tensors' arrival at d from elsewhere, its earliest
        # finish elsewhere, and the least time of those copies into d
        sent = [copy[by_producer[j]] for j in others]
        cost = np.asarray([np.where(queued, x.sum(axis=0), x.max(axis=0)) for x in sent]).reshape(-1, D, D)
        ended = finish[others].reshape(-1, D)[:, :, None] + elsewhere   # [producer, from, to]
        remote = (ended + cost).min(axis=1)
        first = ended.min(axis=1)
        least = (cost + elsewhere).min(axis=1)
        k = min(len(others), ENUMERATED_PRODUCERS)
        ready = _ready(own, others[:k], remote[:k], first[:k], least[:k], start, finish, step_times, ingress)
        for j, arrives in zip(others[k:], remote[k:]):   # each alone: on this device, or copied here
            ready = np.maximum(ready, np.minimum(finish[j], arrives))
        start[i] = ready
        finish[i] = ready + step_times[i]
    return float(finish.min(axis=1).max(initial=0.0))


def _ready(own: list[int], others: list[int], remote: np.ndarray, first: np.ndarray, least: np.ndarray,
           start: np.ndarray, finish: np.ndarray, step_times: np.ndarray, ingress: np.ndarray) -> np.ndarray:
    """The earliest a step can start on each device: the least, over which of `others` share its
    device (P, every subset), of the largest of: the finish of its `own` producers and of P; the
    arrival of the others' copies (`remote`); the own producers and P run one after another from
    the earliest start among them; and where every copy into the device crosses one link
    (`ingress`), the others' copies one after another from the earliest finish among them
    (`first`, each copy at least `least`)."""
    k, D = len(others), start.shape[1]
    masks = (np.arange(2 ** k)[:, None] >> np.arange(k)[None, :] & 1).astype(bool)[:, :, None]   # P x k x 1
    here, away = masks, ~masks
    f = finish[others][None] if k else np.zeros((1, 0, D))
    s = start[others][None] if k else np.zeros((1, 0, D))
    t = step_times[others][None] if k else np.zeros((1, 0, D))
    bound = np.zeros((2 ** k, D))
    for j in own:
        bound = np.maximum(bound, finish[j])
    bound = np.maximum(bound, np.where(here, f, -np.inf).max(axis=1, initial=-np.inf))
    bound = np.maximum(bound, np.where(away, remote[None], -np.inf).max(axis=1, initial=-np.inf))
    earliest = np.where(here, s, np.inf).min(axis=1, initial=np.inf)
    for j in own:
        earliest = np.minimum(earliest, start[j])
    busy = np.where(here, t, 0.0).sum(axis=1) + sum((step_times[j] for j in own), np.zeros(D))
    shares = here.any(axis=1) | bool(own)
    bound = np.maximum(bound, np.where(shares, earliest + busy, -np.inf))
    sends = away.any(axis=1) & ingress[None, :]
    queue = np.where(away, first[None], np.inf).min(axis=1, initial=np.inf) + np.where(away, least[None], 0.0).sum(axis=1)
    bound = np.maximum(bound, np.where(sends, queue, -np.inf))
    return bound.min(axis=0)


def _ingress(sim: Simulator) -> np.ndarray:
    """Per device: whether one link lies on every route into it from another device (so copies
    into it queue there, one at a time)."""
    D = len(sim.devices)
    into = []
    for d in range(D):
        routes = [set(sim.pair_links[s * D + d]) for s in range(D) if s != d]
        into.append(bool(routes) and bool(set.intersection(*routes)))
    return np.asarray(into, dtype=bool)


def residency(sim: Simulator) -> Residency:
    """The resident data the simulator counts (`Simulator.r_bytes`), read by nodes, and its caps."""
    readers = [sorted({sim.step_node[s] for s in steps}) for steps in sim.r_consumers]
    return Residency(list(sim.r_bytes), readers, list(sim.mem_caps))


def lower_bound(graph: OpGraph, devices: list[str], cost: CostModel,
                training: TrainingSpec | None = None, pipeline: Pipeline | None = None,
                caps: dict[str, int] | None = None) -> LowerBound:
    """The largest of: the critical path at the fastest devices, the transfer path, the load
    bound, and for a pipelined step its fill and drain; for `graph` on `devices`; with `training`,
    of the whole training step (a node's forward, backward and the updates it owns share its
    device, so its load is their sum); with `pipeline`, of the pipelined step; with `caps` (device
    -> bytes), of the placements that fit them."""
    priced = _priced(graph, devices, cost, training, pipeline, caps)
    return _placement_bound(graph, priced, training, pipeline, _load(priced, cost, devices))


def plan_lower_bound(graph: OpGraph, devices: list[str], cost: CostModel, training: TrainingSpec | None = None,
                     caps: dict[str, int] | None = None) -> LowerBound:
    """A bound over plans, which may split any op over any devices: the larger of the load bound
    (the LP above already splits each node fractionally over the devices, so it bounds plans too:
    a shard costs at least its share of the whole op, as the roofline prices it, and a device
    holds at least its share of what a split op reads) and the critical path with every step at
    its fastest split (`split_time`: one device, or several at once, slowed by contention, each
    shard paying its launch), transfers and collectives free; and the path-energy bound, which
    holds both at once (`placer.costmodel.path_energy`). No transfer path: a split op ends sooner
    than any device alone could run it."""
    priced = _priced(graph, devices, cost, training, None, caps)
    return _plan_bound(graph, priced, cost, devices, training, _load(priced, cost, devices))


def bounds(graph: OpGraph, devices: list[str], cost: CostModel, training: TrainingSpec | None = None,
           pipeline: Pipeline | None = None, caps: dict[str, int] | None = None,
           plans: bool = False) -> tuple[LowerBound, LowerBound | None]:
    """`lower_bound`, and with `plans` (on one step, no `pipeline`) `plan_lower_bound` too, from one
    pricing of the graph and one load bound: what a comparison with plan rows needs."""
    priced = _priced(graph, devices, cost, training, pipeline, caps)
    load = _load(priced, cost, devices)
    placements = _placement_bound(graph, priced, training, pipeline, load)
    return placements, _plan_bound(graph, priced, cost, devices, training, load) if plans and pipeline is None \
        else None


def _placement_bound(graph: OpGraph, priced: _Priced, training: TrainingSpec | None, pipeline: Pipeline | None,
                     load: _Load) -> LowerBound:
    pipelined = pipeline is not None and pipeline.pipelined
    sim, program, step_times, times = priced.sim, priced.sim.program, priced.step_times, priced.times
    if training is None and not pipelined:
        cp = critical_path(graph, dict(zip(graph.nodes, times.min(axis=1).tolist())))
    else:
        cp = program_critical_path(program, step_times.min(axis=1).tolist())
    drain = fill_drain(program, step_times, len(graph.nodes)) if pipelined else 0.0
    path = transfer_path(sim, step_times)
    value, method, memory = load.value, load.method, load.memory
    log.info("lower bound: critical path %.6f s, with transfers %.6f s, load %.6f s (%s), fill and drain %.6f s",
             cp, path, value, method, drain)
    return LowerBound(value=max(cp, path, value, drain), critical_path=cp, load=value, load_method=method,
                      fill_drain=drain, transfer_path=path, caps_used=memory is not None)


def _plan_bound(graph: OpGraph, priced: _Priced, cost: CostModel, devices: list[str], training: TrainingSpec | None,
                load: _Load) -> LowerBound:
    slowdown, launch = _slowdown(cost, devices), _launch(cost, devices)
    if training is None:
        cp = critical_path(graph, dict(zip(graph.nodes, split_time(priced.times, slowdown, launch).tolist())))
    else:
        cp = program_critical_path(priced.sim.program, split_time(priced.step_times, slowdown, launch).tolist())
    # device weights: the load LP's duals, and each device's speed on the whole step
    with np.errstate(divide="ignore"):
        speeds = 1.0 / np.where(np.isfinite(priced.step_times), priced.step_times, 0.0).sum(axis=0)
    weights = [w for w in (load.duals, np.where(np.isfinite(speeds), speeds, 0.0)) if w is not None]
    energy = path_energy_bound(priced.sim.program, priced.step_times, launch, slowdown, weights)
    log.info("lower bound of plans: critical path split %.6f s, load %.6f s (%s), path-energy %.6f s",
             cp, load.value, load.method, energy)
    return LowerBound(value=max(cp, load.value, energy), critical_path=cp, load=load.value, load_method=load.method,
                      caps_used=load.memory is not None, path_energy=energy)


def split_time(times: np.ndarray, slowdown: list[float], launch: list[float] | None = None) -> np.ndarray:
    """Per row of `times` (seconds on each device): the least time the work can take, whole on one
    device or split over several at once (`path_energy.split_bound`: each slowed by its contention
    factor while the others run, every shard paying its device's `launch`; none given: 0)."""
    return np.minimum(times.min(axis=1), split_bound(times, slowdown, launch))


def _launch(cost: CostModel, devices: list[str]) -> list[float]:
    """Each device's launch overhead, where the cost model has one (the roofline's), else 0."""
    overhead = getattr(cost, "launch_overhead", None)
    return [float(overhead(d)) if overhead else 0.0 for d in devices]


@dataclass
class _Priced:
    """A graph's steps priced on the devices, under the memory caps where any split fits them."""

    sim: Simulator
    step_times: np.ndarray   # (steps, devices)
    times: np.ndarray        # (nodes, devices): each node's steps summed
    memory: Residency | None


def _priced(graph: OpGraph, devices: list[str], cost: CostModel, training: TrainingSpec | None,
            pipeline: Pipeline | None, caps: dict[str, int] | None) -> _Priced:
    if not devices:
        raise PlacerError("no devices given for the lower bound; give at least one")
    sim = Simulator(graph, devices, cost, [(caps or {}).get(d) for d in devices], training, pipeline)
    program = sim.program
    step_times = np.asarray(program.times, dtype=float).reshape(len(program.steps), len(devices))
    node_of = np.asarray(program.node_of, dtype=np.int64)
    times = np.zeros((len(graph.nodes), len(devices)))
    np.add.at(times, node_of, step_times)
    _check_runnable(graph, devices, times)
    memory = residency(sim) if any(c is not None for c in sim.mem_caps) else None
    if memory is not None:
        room = memory.per_node(len(graph.nodes))[:, None] <= np.asarray(
            [math.inf if c is None else c for c in memory.caps])[None, :]
        if np.isfinite(np.where(room, times, np.inf)).any(axis=1).all():   # else nothing fits: caps ignored
            times = np.where(room, times, np.inf)
            step_times = np.where(room[node_of], step_times, np.inf)
        else:
            log.info("lower bound: some node's resident data fits no device's cap; the bound ignores the caps")
            memory = None
    return _Priced(sim, step_times, times, memory)


def _slowdown(cost: CostModel, devices: list[str]) -> list[float]:
    return [float((getattr(cost, "slowdown", None) or {}).get(d, 1.0)) for d in devices]


@dataclass
class _Load:
    """The load bound, how it was found ("lp" or "average"), the memory it held to, and its LP's
    device duals (None without them)."""

    value: float
    method: str
    memory: Residency | None
    duals: list[float] | None = None


def _load(priced: _Priced, cost: CostModel, devices: list[str]) -> _Load:
    memory = priced.memory
    average = float(priced.times.min(axis=1).sum()) / len(devices)
    try:
        lp, duals = load_lp(priced.times, _slowdown(cost, devices), memory)
        if not math.isfinite(lp):
            log.info("lower bound: no split of the work fits the memory caps; the load bound ignores them")
            memory, (lp, duals) = None, load_lp(priced.times, _slowdown(cost, devices))
        return _Load(max(lp, average), "lp", memory, duals)
    except ImportError:
        return _Load(average, "average", memory)


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
