"""The starting placement of a search: the fastest in the simulator of the cheap baselines.

Local search starts from the better of it and the exact solver's placement, the solver is hinted
with it, and the graph policy improves on it. Every placement scored counts as one simulated
sample; a placement two baselines agree on is scored once.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.costmodel.batch_simulator import simulate_batch
from placer.costmodel.simulator import Simulator
from placer.placement import Placement
from placer.placers.base import Caps, LastCall, over_caps, training_of
from placer.placers.expert import expert
from placer.placers.heft import heft
from placer.placers.m_etf import m_etf
from placer.placers.m_sct import m_sct
from placer.placers.partitioners import pipeline_balanced, pipeline_dp, pipeline_params

START_PLACERS = {"m_etf": m_etf, "m_sct": m_sct, "heft": heft, "expert": expert}
PIPELINE_START_PLACERS = {"pipeline_dp": pipeline_dp, "pipeline_balanced": pipeline_balanced,
                          "pipeline_params": pipeline_params}


@dataclass
class Start:
    """The best starting baseline: its name, node assignment (device index per node in graph order)
    and simulated step time, with every candidate's time (None: refused, invalid or over the caps)."""

    name: str | None
    assign: np.ndarray | None
    step_time: float
    candidates: dict[str, float | None] = field(default_factory=dict)
    simulated: int = 0   # placements the simulator scored to choose it
    scored: dict[tuple[int, ...], str] = field(default_factory=dict)   # each of them, under its label


def best_start(graph: OpGraph, devices: list[str], cost: CostModel, caps: Caps | None, sim: Simulator, *,
               seed: int = 0, limit: int | None = None, pipeline=None, given: Placement | None = None) -> Start:
    """The fastest in `sim` of the list heuristics' placements and every single device that fits
    the caps (the simulator's memory and the executor's check); `limit`: score at most that many
    (a placement two of them agree on counts once, under the first one's name). With `given`, that
    placement alone (a learner's, to be polished)."""
    pipelined = pipeline is not None and pipeline.pipelined
    # the simulator scores the candidates: its caps and step (training, pipelined) are the caller's
    key = (tuple(devices), tuple(sorted((caps or {}).items())), seed, tuple(sim.mem_caps), sim.training is None,
           sim.pipeline is None)
    kept = _last_start.get(key, graph, cost)
    if kept is not None and given is None and not pipelined and (limit is None or limit >= kept.simulated):
        return copy.deepcopy(kept)
    placers = {**START_PLACERS, **(PIPELINE_START_PLACERS if pipelined else {})}
    index = {d: i for i, d in enumerate(devices)}
    labels, rows = [], []
    candidates: dict[str, float | None] = {}
    if given is not None:
        placers = {}
        labels.append("given")
        rows.append([index[given.nodes[n]] for n in graph.nodes])
    for name, place in placers.items():
        try:
            p = place(graph, devices, cost, caps, seed=seed)
        except PlacerError:
            candidates[name] = None
            continue
        labels.append(name)
        rows.append([index[p.nodes[n]] for n in graph.nodes])
    for d, device in enumerate(devices if given is None else ()):
        labels.append(f"single:{device}")
        rows.append([d] * len(graph.nodes))
    start = fastest(graph, devices, caps, sim, cost, labels, rows, candidates, limit)
    _last_start.clear()
    if given is None and not pipelined and start.simulated == len(set(map(tuple, rows))):   # every one scored
        _last_start.keep(copy.deepcopy(start), key, graph, cost)
    return start


# The last start that scored every candidate: a copy goes to a caller with the same graph, cost
# model, devices, caps, seed and simulator settings (local search's start, then the exact row's)
_last_start = LastCall()


def fastest(graph: OpGraph, devices: list[str], caps: Caps | None, sim: Simulator, cost: CostModel,
             labels: list[str], rows: list[list[int]], candidates: dict[str, float | None],
             limit: int | None) -> Start:
    """Score the placements `rows` (each distinct one once, at most `limit`, in order) and keep the
    fastest that fits; each scored placement's time goes in `candidates` under its labels."""
    seen: dict[tuple[int, ...], str] = {}   # a placement two heuristics agree on is simulated once
    twins: dict[str, str] = {}
    for label, row in zip(labels, rows):
        twins[label] = seen.setdefault(tuple(row), label)
    labels, rows = list(seen.values()), [list(row) for row in seen]
    if limit is not None:
        labels, rows = labels[:limit], rows[:limit]
    if not rows:
        return Start(None, None, math.inf, candidates)
    scored = {tuple(row): label for label, row in zip(labels, rows)}
    assign = np.asarray(rows, dtype=np.int64)
    result = simulate_batch(sim, assign, peaks=False)
    times = np.where([f is None for f in result.failure], result.step_time, np.inf)
    for label, t in zip(labels, times):
        candidates[label] = float(t) if np.isfinite(t) else None
    candidates.update({label: candidates.get(first) for label, first in twins.items() if label != first})
    training = training_of(cost)
    for i in np.argsort(times, kind="stable"):
        if not np.isfinite(times[i]):
            break
        if caps and over_caps(graph, Placement(list(devices), {n: devices[k] for n, k in zip(graph.nodes, assign[i])}),
                              caps, training):
            candidates.update({label: None for label, first in twins.items() if first == labels[i]})
            continue
        return Start(labels[i], assign[i].copy(), float(times[i]), candidates, len(rows), scored)
    return Start(None, None, math.inf, candidates, len(rows), scored)
