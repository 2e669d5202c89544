"""Stages of a placement: maximal sets of one device's nodes that can run back to back.

A device's nodes are often not contiguous in topological order; cutting the graph at every
device change would make needlessly many pieces. `plan_stages` instead grows each stage with
every node of the stage's device whose inputs are already available, so independent branches
on the same device share a stage. Running the stages one after another in index order computes
the whole graph: every stage reads only graph inputs, initializers and earlier stages' outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from placer.graph.opgraph import OpGraph
from placer.graph.placement_check import assignment
from placer.graph.structure import node_reads
from placer.placement import Placement


@dataclass
class Stage:
    """One piece of a split model: nodes (topological order) on one device, with its tensors."""

    index: int
    device: str
    nodes: list[str]
    inputs: list[str] = field(default_factory=list)       # from graph inputs or earlier stages
    outputs: list[str] = field(default_factory=list)      # read by later stages or graph outputs
    initializers: list[str] = field(default_factory=list)  # weights the stage's nodes read


def plan_stages(graph: OpGraph, placement: Placement) -> list[Stage]:
    """Split `graph` under `placement` into a chain of single-device stages (see module doc)."""
    device_of = assignment(graph, placement, remedy="check it with placer apply first")
    reads = {name: node_reads(op.proto) for name, op in graph.nodes.items()}
    producer = {t: name for name, op in graph.nodes.items() for t in op.outputs if t}
    preds = {name: {producer[t] for t in ts if t in producer} for name, ts in reads.items()}

    stages: list[Stage] = []
    remaining = list(graph.nodes)
    done: set[str] = set()
    while remaining:
        device = device_of[remaining[0]]
        members: list[str] = []
        taken: set[str] = set()
        for name in remaining:  # topological order: a node's producers are decided before it
            if device_of[name] == device and preds[name] <= (done | taken):
                members.append(name)
                taken.add(name)
        done |= taken
        remaining = [n for n in remaining if n not in taken]
        stages.append(Stage(index=len(stages), device=device, nodes=members))
    _fill_tensors(graph, stages, reads)
    return stages


def _fill_tensors(graph: OpGraph, stages: list[Stage], reads: dict[str, list[str]]) -> None:
    """Each stage's inputs, outputs and initializers, from who produces and reads each tensor."""
    stage_of = {name: s.index for s in stages for name in s.nodes}
    produced_in = {t: stage_of[name] for name, op in graph.nodes.items() for t in op.outputs if t}
    graph_outputs = {t.name for t in graph.outputs}
    read_by: dict[str, set[int]] = {}
    for name, ts in reads.items():
        for t in ts:
            read_by.setdefault(t, set()).add(stage_of[name])
    initializers = set(graph.initializers) | {t.name for t in graph.model.graph.initializer}
    for stage in stages:
        ins: dict[str, None] = {}
        inits: dict[str, None] = {}
        outs: dict[str, None] = {}
        for name in stage.nodes:
            for t in reads[name]:
                if produced_in.get(t) == stage.index:
                    continue
                (inits if t in initializers and t not in produced_in else ins)[t] = None
            for t in graph.nodes[name].outputs:
                if t and (t in graph_outputs or read_by.get(t, set()) - {stage.index}):
                    outs[t] = None
        stage.inputs, stage.outputs, stage.initializers = list(ins), list(outs), list(inits)


def stage_of_node(stages: list[Stage]) -> dict[str, int]:
    """Node name -> index of the stage that holds it."""
    return {name: s.index for s in stages for name in s.nodes}
