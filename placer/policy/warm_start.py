"""Warm start: before reinforcement learning, the policy imitates the best baseline placer.

DOPPLER (2023) and Post (2018) both start from a heuristic's placement instead of a uniform
policy; the reinforcement learning that follows has to beat it. The policy is trained on the
target placement (one device per group) with teacher forcing until every group's target device
has probability at least `confidence` (so its greedy placement is the target) but no more, so
that the samples still explore around it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from placer.errors import PlacerError
from placer.graph.grouping import Grouping, align
from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.placement import Placement
from placer.placers.base import Caps
from placer.policy.seq2seq import Seq2SeqPolicy


def imitate(policy: Seq2SeqPolicy, features: torch.Tensor, adjacency: torch.Tensor, target: list[int],
            confidence: float = 0.9, lr: float = 0.003, max_steps: int = 2000) -> int:
    """Train `policy` to put group g on `target[g]` with probability >= `confidence` at every
    step; returns the number of gradient steps taken (`max_steps` when it could not get there)."""
    actions = torch.tensor([target], dtype=torch.long)
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    floor = torch.log(torch.tensor(confidence))
    for step in range(max_steps):
        _, step_log_probs, _ = policy.decode(features, adjacency, actions=actions)
        short = (floor - step_log_probs).clamp(min=0)      # only groups below the confidence pull
        if float(short.detach().max()) == 0.0:
            return step
        optimizer.zero_grad()
        short.sum().backward()
        optimizer.step()
    return max_steps


@dataclass
class WarmStart:
    """The baseline placement the policy starts from, on groups aligned with it."""

    source: str                  # the placer's name, e.g. "m_sct"
    grouping: Grouping           # the learner's groups, split where the baseline cuts them
    group_devices: list[int]     # the baseline as one device index per group of `grouping`
    simulated_step_time: float   # the baseline under the cost model it was chosen with
    candidates: dict[str, float | None]   # every placer tried -> its simulated step time (None: refused/failed)


# Placers the warm start may copy: everything but the random ones (a start that is luck is no start).
WARM_START_PLACERS = ("single", "round_robin", "metis", "m_topo", "m_etf", "m_sct", "memory_greedy", "heft", "expert")
PIPELINE_PLACERS = ("pipeline_dp", "pipeline_balanced", "pipeline_params")   # candidates of a pipelined step


def plan_warm_start(graph: OpGraph, devices: list[str], cost: CostModel, caps: Caps, grouping: Grouping,
                    choice: str = "best_baseline", seed: int = 0, pipeline=None) -> WarmStart:
    """Run the baseline placers (or the one `choice` names), keep the fastest under `cost` (the
    simulator with `caps`, on the pipelined step with `pipeline`), and align `grouping` with its
    placement; with `pipeline`, the pipeline partitioners are candidates too."""
    from placer.costmodel.simulator import Simulator
    from placer.placers import PLACERS
    from placer.placers.base import training_of
    from placer.evaluate.compare import baseline_rows

    pipelined = pipeline is not None and pipeline.pipelined
    names = (WARM_START_PLACERS + (PIPELINE_PLACERS if pipelined else ())) if choice == "best_baseline" else (choice,)
    unknown = [n for n in names if n not in PLACERS]
    if unknown:
        raise PlacerError(f"unknown warm-start placer {unknown[0]!r}; use best_baseline, none, or one of "
                          f"{', '.join(WARM_START_PLACERS)}")
    # On the training objective the placers see a training step's costs per node
    # (`TrainingStepCosts`); the candidates are then judged on the simulated training step itself,
    # memory of gradients and optimizer state included.
    training = training_of(cost)
    sim = Simulator(graph, devices, cost.inner if training is not None else cost, [caps.get(d) for d in devices],
                    training=training, pipeline=pipeline)
    index = {d: i for i, d in enumerate(devices)}
    candidates: dict[str, float | None] = {}
    best: tuple[float, str, Placement] | None = None
    for row in baseline_rows(graph, devices, cost, caps, list(names), seed=seed):
        candidates[row.name] = None
        if row.placement is None:
            continue
        result = sim.simulate([index[row.placement.nodes[n]] for n in graph.nodes])
        candidates[row.name] = result.step_time if result.failure is None else None
        if candidates[row.name] is not None and (best is None or result.step_time < best[0]):
            best = (result.step_time, row.name, row.placement)
    if best is None:
        raise PlacerError("no baseline placer found a placement that fits the devices; train with --warm-start none")
    step_time, label, placement = best
    return warm_start_from(label, placement, graph, devices, grouping, step_time, candidates)


def warm_start_from(source: str, placement: Placement, graph: OpGraph, devices: list[str], grouping: Grouping,
                    step_time: float, candidates: dict[str, float | None]) -> WarmStart:
    """The warm start imitating `placement` (node-level), on `grouping` split where it cuts it."""
    index = {d: i for i, d in enumerate(devices)}
    aligned = align(graph, grouping, placement.nodes)
    group_devices = [index[placement.nodes[members[0]]] for members in aligned.groups]
    return WarmStart(source, aligned, group_devices, step_time, candidates)
