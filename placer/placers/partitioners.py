"""The partitioners of pipeline-parallel tools: contiguous stages of the topological order, one
per device in the given device order, balanced for a pipelined step (`--micro-batches`).

- `pipeline_dp` (PipeDream, Narayanan et al., SOSP 2019): a dynamic program over the
  topological order minimising the slowest stage, a stage's time being its compute on its device
  or the transfer of what crosses into it (links are resources of their own), under memory caps;
  a device may be left empty. Exact on chains (`tests/placers/test_pipeline_placers.py` checks
  it against brute force).
- `pipeline_balanced` (GPipe / torchgpipe's ``balance_by_time``): every device a stage, the
  slowest stage's compute minimised, transfers and memory not considered.
- `pipeline_params` (DeepSpeed's default ``partition_method="parameters"``): every device a stage,
  the largest stage's parameter count minimised.

On the training objective the cost model is a `TrainingStepCosts`: a node's time is its forward,
backward and updates, a crossing tensor's time its copy forward and its gradient back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.placement import Placement
from placer.placers.base import (Caps, _touched_tensors, does_not_fit, make_placement, require_cost,
                                 require_devices)
from placer.costmodel.training_costs import TrainingStepCosts


@dataclass(frozen=True)
class StageMemory:
    """What a stage of nodes i..j-1 holds at its peak: `held[v]` for each of its nodes, for the whole
    step (weights; a training step's saved tensors and optimizer state), plus the most any one of
    its nodes finds alive while it runs, `live[t]` for the node at position t of the topological
    order (the tensors made at or before it and read at or after it: freed after their last reader)."""

    held: np.ndarray
    live: np.ndarray

    def ending_at(self, j: int) -> np.ndarray:
        """The peak of each stage i..j-1, for i = 0..j-1."""
        held = np.concatenate([[0.0], np.cumsum(self.held[:j])])
        live = np.maximum.accumulate(self.live[:j][::-1])[::-1] if j else np.zeros(0)
        return held[j] - held[:j] + live


def stages(work: np.ndarray, cut: np.ndarray | None = None, memory: np.ndarray | StageMemory | None = None,
           caps: list[float] | None = None, every_device: bool = False) -> tuple[list[int], float]:
    """Contiguous stages of nodes 0..n-1, stage k on device k: (device index per node, the
    slowest stage's time). `work[v, d]`: node v's time on device d; `cut[i, d]`: the time of
    moving onto device d what crosses between nodes i-1 and i (a stage of its own); `memory`
    what a stage holds (a `StageMemory`, or `memory[v]` what node v holds throughout); `caps[d]`.
    `every_device`: no device left empty.

    best[k, j] is the least slowest stage of nodes 0..j-1 on devices 0..k-1; its last stage
    starts at some i < j (or device k-1 is empty: i = j), so best[k, j] is the least over i of
    max(best[k-1, i], work of i..j-1 on k-1, cut[i, k-1]): the PipeDream recurrence.
    """
    n, D = work.shape
    prefix = np.vstack([np.zeros((1, D)), np.cumsum(work, axis=0)])
    cut = np.zeros((n, D)) if cut is None else cut.copy()
    cut[0] = 0.0   # nothing crosses into the first stage
    if not isinstance(memory, StageMemory):
        memory = StageMemory(np.zeros(n) if memory is None else np.asarray(memory, dtype=float), np.zeros(n))
    caps = np.asarray(caps or [math.inf] * D, dtype=float)
    best = np.full((D + 1, n + 1), np.inf)
    best[0, 0] = 0.0
    start = np.zeros((D + 1, n + 1), dtype=np.int64)
    # j outside, every device at once inside: a stage's memory does not depend on its device, and
    # row d of `cost` reads best[d, :j] (best[k-1] for k = d + 1), final once column j - 1 is
    for j in range(n + 1):
        if j:
            # an inf - inf (a node that cannot run on d) is nan: such a stage is impossible
            span = np.nan_to_num(prefix[j] - prefix[:j], nan=np.inf).T
            cost = np.maximum(np.maximum(best[:D, :j], span), cut[:j].T)
            cost[memory.ending_at(j)[None, :] > caps[:, None]] = np.inf
            first = np.argmin(cost, axis=1)
            for d in np.flatnonzero(np.isfinite(cost).any(axis=1)):
                start[d + 1, j] = first[d]
                best[d + 1, j] = cost[d, first[d]]
        if not every_device:
            for k in range(1, D + 1):
                if best[k - 1, j] <= best[k, j]:   # device k-1 left empty
                    best[k, j], start[k, j] = best[k - 1, j], j
    device = [0] * n
    j = n
    for k in range(D, 0, -1):
        i = int(start[k, j])
        device[i:j] = [k - 1] * (j - i)
        j = i
    return device, float(best[D, n])


def _work(graph: OpGraph, devices: list[str], cost: CostModel) -> np.ndarray:
    return np.array([[cost.op_time(node, d) for d in devices] for node in graph.nodes.values()], dtype=float)


def _cuts(graph: OpGraph, devices: list[str], cost: CostModel) -> np.ndarray:
    """cut[i, d]: the slowest copy onto device d of the bytes that cross between node i-1 and i
    (a tensor made before i and read at or after it), in topological order."""
    position = {name: i for i, name in enumerate(graph.nodes)}
    crossing = np.zeros(len(graph.nodes) + 1)
    for i, node in enumerate(graph.nodes.values()):
        for t in node.outputs:
            readers = [position[r] for r in graph.consumers.get(t, ()) if r in position]
            if t and readers and max(readers) > i:
                nbytes = graph.tensors[t].nbytes if t in graph.tensors else 0
                crossing[i + 1] += nbytes
                crossing[max(readers) + 1] -= nbytes
    crossing = np.cumsum(crossing)[:-1]
    return np.array([[max((cost.transfer_time(int(b), s, d) for s in devices if s != d), default=0.0)
                      for d in devices] for b in crossing], dtype=float)


def _memory(graph: OpGraph, cost: CostModel | None) -> StageMemory:
    """What a stage holds. A training step: each node everything its steps read or write (its
    gradients and saved activations too) and its parameters' optimizer state, nothing freed (a
    tensor several nodes share counts for each), which bounds the executor's accounting. Inference:
    each node's weights for the whole step, and the activations alive at each node, freed after
    their last reader as the simulator frees them (a graph output kept to the end)."""
    program = cost.program if isinstance(cost, TrainingStepCosts) else None
    if program is not None:
        touches, held = _touched_tensors(graph, program)
        return StageMemory(np.array([held.get(n, 0) + sum(program.size(t) for t in touches[n]) for n in graph.nodes],
                                    dtype=float), np.zeros(len(graph.nodes)))
    return StageMemory(np.array([node.param_bytes for node in graph.nodes.values()], dtype=float),
                       _live_activations(graph))


def _live_activations(graph: OpGraph) -> np.ndarray:
    """live[t]: the bytes of the tensors alive while the node at position t runs, in topological
    order: made at or before t (a graph input from the start) and read at or after t (a graph
    output to the end). Weights are held apart (`StageMemory.held`)."""
    n = len(graph.nodes)
    position = {name: i for i, name in enumerate(graph.nodes)}
    outputs = {o.name for o in graph.outputs}
    delta = np.zeros(n + 1)
    made = {t: position[name] for name, node in graph.nodes.items() for t in node.outputs if t}
    made.update((i.name, 0) for i in graph.inputs)
    for t, first in made.items():
        readers = [position[r] for r in graph.consumers.get(t, ()) if r in position]
        last = n - 1 if t in outputs else max(readers, default=first)
        delta[first] += graph.tensors[t].nbytes if t in graph.tensors else 0
        delta[last + 1] -= graph.tensors[t].nbytes if t in graph.tensors else 0
    return np.cumsum(delta)[:n]


def _place(graph: OpGraph, devices: list[str], name: str, work: np.ndarray, cut: np.ndarray | None = None,
           caps: Caps | None = None, cost: CostModel | None = None, every_device: bool = False) -> Placement:
    memory = _memory(graph, cost) if caps else None
    limits = [float((caps or {}).get(d, math.inf)) for d in devices]
    device, slowest = stages(work, cut, memory, limits, every_device)
    if not math.isfinite(slowest):
        raise does_not_fit(name, graph, caps or {}, cost=cost)
    nodes = {n: devices[k] for n, k in zip(graph.nodes, device)}
    return make_placement(graph, devices, nodes, name, slowest_stage=slowest)


def pipeline_dp(graph: OpGraph, devices: list[str], cost: CostModel | None = None,
                caps: Caps | None = None, *, seed: int = 0) -> Placement:
    """PipeDream's partition: contiguous stages minimising the slowest stage, transfers included,
    within the caps."""
    require_devices(devices)
    cost = require_cost(cost, "pipeline_dp")
    return _place(graph, devices, "pipeline_dp", _work(graph, devices, cost), _cuts(graph, devices, cost), caps, cost)


def pipeline_balanced(graph: OpGraph, devices: list[str], cost: CostModel | None = None,
                      caps: Caps | None = None, *, seed: int = 0) -> Placement:
    """torchgpipe's balance by time: a stage per device, the slowest stage's compute minimised."""
    require_devices(devices)
    cost = require_cost(cost, "pipeline_balanced")
    return _place(graph, devices, "pipeline_balanced", _work(graph, devices, cost),
                  every_device=len(devices) <= len(graph.nodes))


def pipeline_params(graph: OpGraph, devices: list[str], cost: CostModel | None = None,
                    caps: Caps | None = None, *, seed: int = 0) -> Placement:
    """DeepSpeed's balance by parameters: a stage per device, the largest parameter count minimised."""
    require_devices(devices)
    params = np.array([[node.param_bytes] * len(devices) for node in graph.nodes.values()], dtype=float)
    return _place(graph, devices, "pipeline_params", params, every_device=len(devices) <= len(graph.nodes))
