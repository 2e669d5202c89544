"""A placement as ONNX Runtime partitions: per device, as few pieces as the dependencies allow.

A node's *level* counts the device changes on the longest path of producers that leads to it:
a node waits on another device only through a producer of a lower level. The nodes of one device
and one level form a partition, so nodes of one device that do not wait on another device share a
partition, and a partition never waits on one of a higher level: each device runs its partitions
in level order, each as soon as its inputs exist, and no two devices can wait on each other.

*Stages* cut further: a stage number per node that never decreases along an edge. Nodes of one
device, level and stage form a partition. Partitions run in order of stage plus level, then level
(a topological order: along an edge neither decreases, and where both stay the node stays in its
partition). A long chain on one device (an unrolled recurrence's first layer) then hands its
first steps to the next device before it ends, and goes on with its next steps before it takes
back what the other device made of the first: without stages the next device waits for the whole
chain. By default a node's stage is its band of depth (`depth_stages`): at most `STAGES` bands,
each `STAGE_DEPTH` nodes deep or more, so a shallow graph stays uncut; and only where the bands
let a device start sooner, since each cut costs a session call and the fusions across it.

Each partition is a standalone model cut from the bound model (`OpGraph.model`): its inputs
(graph inputs and other partitions' tensors, outer-scope reads of subgraphs included), its
outputs (read by another partition, or graph outputs), the initializers its nodes read, and the
values of the nodes placer folds (shape and constant subgraphs, `placer.kernels.prepare`) as
initializers: a `Shape` of another device's tensor is known before the step and waits on nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph


STAGES = 8         # depth bands a graph is cut into, at most
STAGE_DEPTH = 16   # nodes of depth a band spans, at least


@dataclass
class Partition:
    """One session's share of a placement: nodes of one device (topological order) and its tensors."""

    index: int              # run order: a valid topological order of the partitions
    device: str
    nodes: list[str]
    inputs: list[str] = field(default_factory=list)     # graph inputs and other partitions' tensors
    outputs: list[str] = field(default_factory=list)    # read by another partition, or graph outputs
    constants: list[str] = field(default_factory=list)  # initializers and folded values it reads


def node_levels(graph: OpGraph, assignment: Mapping[str, str], skip: set[str]) -> dict[str, int]:
    """Node -> the number of device changes on its longest path of producers (nodes in `skip`,
    the folded ones, run nowhere and count as constants)."""
    level: dict[str, int] = {}
    for name, op in graph.nodes.items():
        if name in skip:
            continue
        own = assignment[name]
        level[name] = max((level[p] + (assignment[p] != own) for p in _producers(graph, name) if p in level),
                          default=0)
    return level


def depth_stages(graph: OpGraph, skip: set[str]) -> dict[str, int]:
    """Node -> its band of depth (the nodes on its longest path of producers, those in `skip` not
    counted): at most `STAGES` bands of equal depth, each at least `STAGE_DEPTH` deep."""
    depth: dict[str, int] = {}
    for name in graph.nodes:
        if name not in skip:
            depth[name] = 1 + max((depth[p] for p in _producers(graph, name) if p in depth), default=-1)
    band = max(STAGE_DEPTH, -(-(max(depth.values(), default=0) + 1) // STAGES))
    return {name: d // band for name, d in depth.items()}


def plan_partitions(graph: OpGraph, assignment: Mapping[str, str], folded: Mapping[str, object] = (),
                    folded_nodes: set[str] = frozenset(), stages: Mapping[str, int] | None = None
                    ) -> list[Partition]:
    """The partitions of `assignment` (node -> device) over `graph`, in run order; `folded` are the
    tensors placer computes once (their nodes, `folded_nodes`, are in no partition); `stages`
    (node -> number, 0 where absent; by default `depth_stages`; {}: uncut) cut them further, see
    the module doc."""
    levels = node_levels(graph, assignment, set(folded_nodes))
    if stages is None:
        bands = depth_stages(graph, set(folded_nodes))
        stages = bands if _bands_let_a_device_start_sooner(graph, assignment, levels, bands) else {}
    stage = _checked_stages(graph, levels, stages)
    keys: dict[tuple[int, int, str], list[str]] = {}
    for name in levels:   # topological order, so each partition's nodes are too
        keys.setdefault((stage(name), levels[name], assignment[name]), []).append(name)
    position = {n: i for i, n in enumerate(graph.nodes)}
    # stage plus level first: a device runs its next stage's first-level nodes before those that
    # wait on another device's work of this stage, so the devices do not take turns stage by stage
    ordered = sorted(keys, key=lambda k: (k[0] + k[1], k[1], position[keys[k][0]]))
    parts = [Partition(i, key[2], keys[key]) for i, key in enumerate(ordered)]
    _fill_tensors(graph, parts, set(folded))
    return parts


def _bands_let_a_device_start_sooner(graph: OpGraph, assignment: Mapping[str, str], levels: Mapping[str, int],
                                     bands: Mapping[str, int]) -> bool:
    """Whether cutting by `bands` lets some device start sooner: a tensor crosses to another device
    from a band before the last of its producer's uncut partition, or into a band after the first of
    its reader's. Where none does (data parallelism: each replica's result crosses at its end),
    the bands only add session calls and break fusions (ResNet-50's data-parallel plan 9% slower cut).
    """
    first: dict[tuple[int, str], int] = {}
    last: dict[tuple[int, str], int] = {}
    for name, level in levels.items():
        group = (level, assignment[name])
        first[group] = min(first.get(group, bands[name]), bands[name])
        last[group] = max(last.get(group, bands[name]), bands[name])
    for name in levels:
        for producer in _producers(graph, name):
            if producer in levels and assignment[producer] != assignment[name] and (
                    bands[producer] < last[levels[producer], assignment[producer]]
                    or bands[name] > first[levels[name], assignment[name]]):
                return True
    return False


def _checked_stages(graph: OpGraph, levels: Mapping[str, int], stages: Mapping[str, int]):
    """node -> its stage; a stage lower than a producer's is a `PlacerError`: its partition would
    run before one it waits on."""
    def stage(name: str) -> int:
        return stages.get(name, 0)

    for name in levels:
        for producer in _producers(graph, name):
            if producer in levels and stage(producer) > stage(name):
                raise PlacerError(f"stage {stage(name)} of {name} is below stage {stage(producer)} of {producer}, "
                                  "which it reads: a node's stage must be at least its producers'")
    return stage


def _producers(graph: OpGraph, name: str):
    """The nodes that make what `name` reads (graph inputs and initializers have none)."""
    return (graph.producer.get(t) for t in _reads(graph, name))


def _reads(graph: OpGraph, name: str) -> list[str]:
    op = graph.nodes[name]
    return [t for t in dict.fromkeys(op.inputs + op.implicit_inputs) if t]


def _fill_tensors(graph: OpGraph, parts: list[Partition], folded: set[str]) -> None:
    part_of = {n: p.index for p in parts for n in p.nodes}
    made_in = {t: part_of[n] for n in part_of for t in graph.nodes[n].outputs if t}
    read_in: dict[str, set[int]] = {}
    for n, i in part_of.items():
        for t in _reads(graph, n):
            read_in.setdefault(t, set()).add(i)
    constants = folded | set(graph.initializers)
    graph_outputs = {o.name for o in graph.outputs}
    for part in parts:
        ins, consts, outs = {}, {}, {}
        for n in part.nodes:
            for t in _reads(graph, n):
                if made_in.get(t) == part.index:
                    continue
                (consts if t in constants and t not in made_in else ins)[t] = None
            for t in graph.nodes[n].outputs:
                if t and (t in graph_outputs or read_in.get(t, set()) - {part.index}):
                    outs[t] = None
        part.inputs, part.constants, part.outputs = list(ins), list(consts), list(outs)


def partition_model(graph: OpGraph, part: Partition, folded: Mapping[str, np.ndarray],
                    types: Mapping[str, onnx.ValueInfoProto]) -> onnx.ModelProto:
    """The standalone model of `part`: its nodes, declared inputs and outputs, the initializers and
    folded values it reads, and the tensors' `types` (`value_types`) inside."""
    model = graph.model
    weights = {t.name: t for t in model.graph.initializer}
    inits = [weights[t] if t in weights else numpy_helper.from_array(np.asarray(folded[t]), t)
             for t in part.constants]
    boundary = set(part.inputs) | set(part.outputs)
    inside = [types[t] for n in part.nodes for t in graph.nodes[n].outputs
              if t and t not in boundary and t in types]
    sub = helper.make_graph([graph.nodes[n].proto for n in part.nodes],
                            f"{model.graph.name or 'graph'}_part{part.index}",
                            inputs=[types[t] for t in part.inputs], outputs=[types[t] for t in part.outputs],
                            initializer=inits, value_info=inside)
    cut = helper.make_model(sub, opset_imports=list(model.opset_import), functions=list(model.functions),
                            producer_name="placer runtime")
    cut.ir_version = model.ir_version
    return cut


def value_types(graph: OpGraph) -> dict[str, onnx.ValueInfoProto]:
    """Every tensor's declared type in the bound model, else one made from its static shape."""
    g = graph.model.graph
    types = {v.name: v for v in [*g.value_info, *g.input, *g.output] if v.type.WhichOneof("value")}
    for name, info in graph.tensors.items():
        if name not in types:
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype))
            types[name] = helper.make_tensor_value_info(name, elem, list(info.shape))
    return types
