"""Many plans' inference steps at once, equal to `pricing.simulate_plan`'s one at a time.

Lowering a plan and building its simulator costs about 20 ms on Inception-v3; the simulator's
batched pass (`placer.costmodel.batch_simulator`) prices thousands of placements of one graph a
second. What lets plans use it: an op that runs whole on one device, with its tensors whole, and
that neither reads a tensor a split op (or a stored layout) holds nor feeds a split op, lowers to
itself whatever its device (`convert.py` makes no layout change for it, and a copy between two
devices is the simulator's, not a node). So plans that agree on every other op ("their class":
the split ops, the ops around them, the stored weights) lower to one graph, and differ only in
where the free ops run: rows of one batched pass over the class's graph, lowered once.

Searches meet such plans all the time (an op moved between devices beside a DDP block); a plan
that splits something new costs one lowering. Training steps are not batched: their replicas'
copies and gradient collectives depend on where every op runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from placer.costmodel.batch_simulator import simulate_batch
from placer.costmodel.roofline import RooflineCostModel, cluster_measurer
from placer.costmodel.simulator import Simulator
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster
from placer.plans.lower import lower
from placer.plans.plan import OpPlan, Plan
from placer.plans.pricing import gc_paused, plan_cost

FEW = 8     # rows of one graph simulated one by one rather than batched
KEPT = 64   # lowered graphs kept for the plans to come


@dataclass
class _Class:
    """The lowered graph a class of plans shares: its simulator, the lowered placement of the plan
    that made it, and where each free op sits among the lowered graph's nodes."""

    simulator: Simulator | None          # None: the class's plans cannot be lowered
    base: np.ndarray | None              # the first plan's device index per lowered node
    free: list[str]                      # the free ops, source names (they keep them when lowered)
    free_at: np.ndarray | None           # their indices among the lowered graph's nodes


class PlanBatchSimulator:
    """Inference step times of plans of `graph` on `cluster`: each class lowered once, its plans
    simulated together; infinity where a plan fails (out of memory, or a layout it cannot make)."""

    def __init__(self, graph: OpGraph, cluster: Cluster) -> None:
        self.graph, self.cluster = graph, cluster
        self.devices = [d.name for d in cluster.devices]
        self._index = {d: k for k, d in enumerate(self.devices)}
        self._order = list(graph.nodes)
        self._position = {n: i for i, n in enumerate(self._order)}
        self._seen: dict[int, tuple[OpPlan, int]] = {}
        self._codes: dict[OpPlan, int] = {}
        # source ops on either side of each op: an op next to a split op is fixed in its class
        self._near = {n: {graph.producer[t] for t in node.inputs if t in graph.producer}
                      | {c for t in node.outputs if t for c in graph.consumers.get(t, ())}
                      for n, node in graph.nodes.items()}
        self._classes: dict[tuple, _Class] = {}
        self.lowered = 0   # classes lowered so far

    def step_times(self, plans: Sequence[Plan]) -> np.ndarray:
        """Each plan's simulated inference step (seconds; infinity where it fails)."""
        with gc_paused():
            return self._step_times(plans)

    def _step_times(self, plans: Sequence[Plan]) -> np.ndarray:
        out = np.full(len(plans), np.inf)
        rows: dict[tuple, list[tuple[int, Plan]]] = {}
        for k, plan in enumerate(plans):
            rows.setdefault(self.class_key(plan), []).append((k, plan))
        for key, members in rows.items():
            cls = self._class(key, members[0][1])
            if cls.simulator is None:
                continue
            assign = np.repeat(cls.base[None, :], len(members), axis=0)
            unknown = np.zeros(len(members), dtype=bool)
            if cls.free:
                # a device the cluster does not have (-1): the plan fails, as one simulated alone fails invalid
                where = np.asarray([[self._index.get(plan.ops[n].devices[0], -1) for n in cls.free]
                                    for _, plan in members], dtype=np.int64)
                unknown = (where < 0).any(axis=1)
                assign[:, cls.free_at] = np.where(unknown[:, None], cls.base[cls.free_at], where)
            out[[k for k, _ in members]] = np.where(unknown, np.inf, self._simulate(cls, assign))
        return out

    @staticmethod
    def _simulate(cls: _Class, assign: np.ndarray) -> np.ndarray:
        """Each row's step time (infinity where it fails). A few rows go one by one: the batched
        pass lays out its tables per graph first, which costs more than a few simulations."""
        if len(assign) < FEW:
            found = [cls.simulator.simulate(tuple(row)) for row in assign.tolist()]
            return np.asarray([r.step_time if r.failure is None else np.inf for r in found])
        result = simulate_batch(cls.simulator, assign, peaks=False)
        return np.where([f is not None for f in result.failure], np.inf, result.step_time)

    def class_key(self, plan: Plan) -> tuple:
        """What the plans lowering to one graph share: their devices, stored weights, and the plan
        of every op that is not free (split, or not whole in layout, or next to such an op, or
        reading a stored weight), by graph position. Called per plan, so kept to a few dict
        lookups per pinned op."""
        ops = plan.ops
        # most ops are whole with no layouts: the cheap test first, `placed` only for the rest
        fixed = [n for n, op in ops.items() if (len(op.devices) > 1 or op.inputs or op.outputs) and not op.placed]
        pinned = set(fixed)
        for n in fixed:
            pinned |= self._near[n]
        held = plan.extra.get("placer", {})
        stored = held.get("stored", {})
        for weight in stored:
            pinned.update(self.graph.consumers.get(weight, ()))
        return (tuple(plan.devices), tuple(sorted(stored.items())), tuple(held.get("stored_on", ())) if stored else (),
                tuple(sorted((self._position[n], self._code(ops[n])) for n in pinned)))

    def _code(self, op: OpPlan) -> int:
        """A small number per distinct op plan (equal ones share it): hashing a key of numbers is
        cheaper than hashing op plans. Each op plan seen is held, so its id names no other object."""
        seen = self._seen.get(id(op))
        if seen is None:
            seen = self._seen[id(op)] = (op, self._codes.setdefault(op, len(self._codes)))
        return seen[1]

    def _class(self, key: tuple, plan: Plan) -> _Class:
        """The class's lowering, the most recently used `KEPT` kept (each holds a graph and its simulator)."""
        cls = self._classes.pop(key, None) or self._lower(key, plan)
        self._classes[key] = cls
        while len(self._classes) > KEPT:
            del self._classes[next(iter(self._classes))]
        return cls

    def _lower(self, key: tuple, plan: Plan) -> _Class:
        self.lowered += 1
        pinned = {self._order[i] for i, _ in key[3]}
        free = [n for n in self._order if n not in pinned]
        try:
            lowered = lower(self.graph, plan)
            simulator = cluster_measurer(self.cluster, lowered.graph,
                                         plan_cost(lowered, lambda g: RooflineCostModel(self.cluster, g))).simulator
        except PlacerError:
            return _Class(None, None, free, None)
        if not set(lowered.placement.nodes.values()) <= self._index.keys():   # as one alone: invalid
            return _Class(None, None, free, None)
        position = {n: i for i, n in enumerate(lowered.graph.nodes)}
        base = np.asarray([self._index[lowered.placement.nodes[n]] for n in lowered.graph.nodes], dtype=np.int64)
        return _Class(simulator, base, free, np.asarray([position[n] for n in free], dtype=np.int64))

