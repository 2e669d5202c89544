"""A large model of repeated blocks, searched on a few of its blocks: the coarsening that lets a
plan search run on a 70B model, whose every plan lowers to 100,000 nodes and more.

The reduced graph keeps what comes before the run of blocks (`placer.graph.repeats`), its first
`k` blocks and what comes after, rewired to read the k-th block where it read the last. Reduced
block b stands for the full blocks ``b * n // k`` to ``(b + 1) * n // k - 1`` (n blocks in all), so
a plan maps both ways: a full plan to the reduced one by each reduced block's first full block
(`to_reduced`), a reduced plan to the full one by giving each full block its reduced block's
plan (`to_full`), which keeps stages contiguous.

Memory is checked for the full model: each kept block's weights count as many times as the
blocks it stands for, on every device that holds them, which is exact for weights resident the
whole step, and what the blocks read from before the run (a mask, a rotary table) counts as held
throughout, which it is until a device's last block (`ReducedScorer`): never under the whole
model's peak, and over it by those tensors at most. Times are the reduced model's: a search compares plans by them,
and the plan found is simulated on the full graph before anyone sees a figure of it.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace

import onnx

from placer.costmodel.roofline import RooflineCostModel, cluster_measurer
from placer.engines.failures import OOM
from placer.graph.load import build_dag
from placer.graph.opgraph import OpGraph
from placer.graph.repeats import Repeats, find_repeats
from placer.hardware import Cluster
from placer.measure.measurement import Measurement
from placer.plans.lower import lower, renamed
from placer.plans.plan import Plan
from placer.plans.pricing import plan_cost
from placer.plans.scoring import PlanScorer

LARGE = 1000        # nodes: a graph this large is searched on its reduced copy where it has repeats (the zoo's are under)
UNCAPPED = 1 << 62  # bytes: the reduced simulation's caps (the full model's are checked after)


@dataclass
class Reduced:
    """`full` and its copy with `kept` of its repeated blocks."""

    full: OpGraph
    graph: OpGraph
    repeats: Repeats
    kept: int

    @property
    def blocks(self) -> int:
        return len(self.repeats.blocks)

    def stands_for(self, b: int) -> range:
        """The full blocks reduced block `b` stands for."""
        n, k = self.blocks, self.kept
        return range(b * n // k, (b + 1) * n // k)

    def to_reduced(self, plan: Plan) -> Plan:
        """`plan` of the full graph as a plan of the reduced one: each kept block takes the plan of
        the first full block it stands for."""
        blocks = self.repeats.blocks
        ops = dict(plan.ops)
        for b in range(self.kept):
            for mine, theirs in zip(blocks[b], blocks[self.stands_for(b)[0]]):
                ops[mine] = plan.ops[theirs]
        return Plan(list(plan.devices), {n: ops[n] for n in self.graph.nodes}, self.graph.sha256)

    def to_full(self, plan: Plan) -> Plan:
        """`plan` of the reduced graph as a plan of the full one: each full block takes the plan of
        the reduced block that stands for it."""
        blocks = self.repeats.blocks
        ops = {n: plan.ops[n] for n in self.graph.nodes}
        for b in range(self.kept):
            for j in self.stands_for(b):
                for mine, theirs in zip(blocks[b], blocks[j]):
                    ops[theirs] = plan.ops[mine]
        return Plan(list(plan.devices), {n: ops[n] for n in self.full.nodes}, self.full.sha256)

    def carried(self) -> dict[str, list[str]]:
        """Each node of a kept block standing for several -> what it reads from before the run,
        weights aside (a mask, a rotary table)."""
        inside = {t for b in self.repeats.blocks for n in b for t in self.full.nodes[n].outputs}
        every = {t for n in self.repeats.blocks[1] for t in self.full.nodes[n].inputs}   # not the chain's entry
        return {n: [t for t in self.graph.nodes[n].inputs
                    if t in every and t not in inside and t not in self.graph.initializers]
                for b in range(self.kept) if len(self.stands_for(b)) > 1 for n in self.repeats.blocks[b]}

    def weight_counts(self) -> dict[str, int]:
        """Each kept block's own weights -> how many full blocks' weights they stand for."""
        counts = {}
        shared = set(self.graph.initializers) - {t for b in self.repeats.blocks[self.kept:]
                                                 for n in b for t in self.full.nodes[n].inputs}
        for b in range(self.kept):
            for n in self.repeats.blocks[b]:
                for t in self.graph.nodes[n].inputs:
                    if t in self.graph.initializers and t in shared:   # a weight no dropped block reads
                        counts[t] = len(self.stands_for(b))
        return counts


def reduce(graph: OpGraph, kept: int, large: int | None = None) -> Reduced | None:
    """`graph` with `kept` of its repeated blocks, or None where it is smaller than `large` nodes
    (default `LARGE`) or has no run of more than `kept` blocks."""
    if len(graph.nodes) < (LARGE if large is None else large):
        return None
    repeats = find_repeats(graph)
    if repeats is None or len(repeats.blocks) <= kept:
        return None
    return Reduced(graph, _reduced_graph(graph, repeats, kept), repeats, kept)


def _reduced_graph(graph: OpGraph, repeats: Repeats, kept: int) -> OpGraph:
    """The prefix, the first `kept` blocks and the suffix, reading the kept last block's tensors
    where they read the last block's."""
    last, mine = repeats.blocks[-1], repeats.blocks[kept - 1]
    moved = {t: u for a, b in zip(last, mine) for t, u in zip(graph.nodes[a].outputs, graph.nodes[b].outputs) if t}
    names = [*repeats.prefix, *(n for b in repeats.blocks[:kept] for n in b), *repeats.suffix]
    nodes = {}
    for n in names:
        node = graph.nodes[n]
        read = tuple(moved.get(t, t) for t in node.inputs)
        nodes[n] = node if read == node.inputs else renamed(node, n, read, node.outputs)
    used = {t for node in nodes.values() for t in (*node.inputs, *node.outputs) if t}
    # the last block's outputs are the kept last block's; a dropped block's own (a layer's cache) are gone
    outputs = [graph.tensors[moved.get(o.name, o.name)] for o in graph.outputs if moved.get(o.name, o.name) in used]
    initializers = {t: info for t, info in graph.initializers.items() if t in used}
    model = onnx.ModelProto()
    # a new model, not a copy of the full one, which may hold every weight
    model.ir_version = graph.model.ir_version
    model.opset_import.extend(graph.model.opset_import)
    model.graph.name = f"{graph.model.graph.name}-reduced"
    model.graph.node.extend(node.proto for node in nodes.values())
    model.graph.initializer.extend(t for t in graph.model.graph.initializer if t.name in initializers)
    tensors = {t: info for t, info in graph.tensors.items() if t in used}
    digest = hashlib.sha256(f"{graph.sha256}/reduced/{kept}".encode()).hexdigest()
    return replace(graph, model=model, nodes=nodes, tensors=tensors, initializers=initializers,
                   inputs=[i for i in graph.inputs if i.name in used], outputs=outputs, sha256=digest,
                   dag=build_dag(nodes, tensors),
                   constants={n: t for n, t in graph.constants.items() if t in initializers})


def uncapped(cluster: Cluster) -> Cluster:
    """`cluster` with memory no plan fills: the reduced model's memory is checked as the full one's."""
    devices = tuple(replace(d, model=replace(d.model, memory_bytes=UNCAPPED)) for d in cluster.devices)
    return replace(cluster, devices=devices)


class ReducedScorer(PlanScorer):
    """A plan search's scorer on `reduced.graph` (inference steps): the reduced step's time, failed
    where a device's memory with each kept block's weights counted for the blocks it stands for is
    over the cluster's capacity."""

    def __init__(self, reduced: Reduced, cluster: Cluster, samples: int) -> None:
        super().__init__(reduced.graph, cluster, samples)
        self.reduced, self.counts, self.carried = reduced, reduced.weight_counts(), reduced.carried()
        self._uncapped = uncapped(cluster)

    def _simulate(self, plan: Plan) -> Measurement:
        lowered = lower(self.graph, plan, runnable=False)   # priced, never run
        cost = plan_cost(lowered, lambda g: RooflineCostModel(self.cluster, g))
        m = cluster_measurer(self._uncapped, lowered.graph, cost).measure(lowered.placement)
        if not m.ok:
            return m
        extra: dict[str, int] = {}
        held = set()
        for name, node in lowered.graph.nodes.items():
            device = lowered.placement.nodes[name]
            for t in node.inputs:
                source = lowered.slices[t].tensor if t in lowered.slices else t
                if t in lowered.graph.initializers and self.counts.get(source, 1) > 1 and (device, t) not in held:
                    held.add((device, t))
                    extra[device] = extra.get(device, 0) + (self.counts[source] - 1) * lowered.graph.initializers[t].nbytes
            # what every block reads from before the run (a mask, a rotary table) stays on a device
            # until its last block there: counted whole, where one block stands for several
            for t in self.carried.get(lowered.shard_of.get(name, name), ()):
                if (device, t) not in held:
                    held.add((device, t))
                    extra[device] = extra.get(device, 0) + self.graph.tensors[t].nbytes
        peaks = {d: p + extra.get(d, 0) for d, p in m.peak_memory.items()}
        caps = {d.name: d.model.memory_bytes for d in self.cluster.devices}
        over = [d for d, p in peaks.items() if p > caps.get(d, math.inf)]
        if over:
            d = over[0]
            return Measurement(False, peak_memory=peaks, failure=OOM,
                               reason=f"{d} needs {peaks[d]} bytes at peak with every block's weights, over its "
                                      f"cap of {caps[d]}")
        return replace(m, peak_memory=peaks)
