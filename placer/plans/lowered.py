"""The graph a plan lowers to, built node by node: an ordinary `OpGraph` and `Placement` that the
simulator walks as it walks any placed graph.

Shards of the plan's ops are ONNX nodes of their own, with their own sliced tensors. The steps of
layout changes are nodes of domain `DOMAIN`, each marked with how it is priced (`HelperCost`): the
first step of a collective on each device is its kernel's launch, priced by the cost model as an op
that computes and moves nothing; every other step is free, since a collective's time is its
transfers (NCCL reduces inside its copy kernel, and a slice or a hand-on is a view), and the
simulator prices those as copies over the devices' routes, queued on shared links.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import onnx
from onnx import helper

from placer.graph.load import build_dag
from placer.graph.opgraph import OpGraph, OpNode, TensorInfo
from placer.placement import Placement
from placer.plans.layout import Layout

DOMAIN = "placer.plan"   # placer.kernels.collectives runs its ops


class HelperCost(Enum):
    LAUNCH = "launch"   # a collective's kernel on this device: the cost model's op that does nothing
    FREE = "free"       # a step whose time is its transfers, or a view


@dataclass(frozen=True)
class SourceSlice:
    """Device k's slice (of n) of a source tensor (a weight or graph input) in `layout` (a
    `Replicate()` one is a whole copy under another name)."""

    tensor: str
    layout: Layout
    k: int
    n: int


@dataclass
class Lowered:
    """A plan as a graph and placement, and how its helper nodes are priced (the rest as any op).

    What running it needs besides: where each sliced weight or input comes from (`slices`), which
    source op each shard computes a part of (`shard_of`), and how each source output lies on its
    devices (`outputs`: its layout and what each device holds)."""

    graph: OpGraph
    placement: Placement
    helpers: dict[str, HelperCost]
    slices: dict[str, SourceSlice] = field(default_factory=dict)
    shard_of: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, tuple[Layout, tuple[str, ...]]] = field(default_factory=dict)


@dataclass
class LoweredBuilder:
    """Nodes, tensors and devices of the lowered graph, added in a topological order."""

    source: OpGraph
    devices: list[str]
    # False: for pricing alone (a search's thousands of plans): no ONNX protos, no DiGraph, neither of
    # which the simulator reads; the new nodes' protos and the graph's `dag` are None (a reader fails
    # loudly), its `model` an empty ModelProto
    runnable: bool = True
    nodes: dict[str, OpNode] = field(default_factory=dict)
    placed: dict[str, str] = field(default_factory=dict)
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    initializers: dict[str, TensorInfo] = field(default_factory=dict)
    inputs: dict[str, TensorInfo] = field(default_factory=dict)
    helpers: dict[str, HelperCost] = field(default_factory=dict)
    slices: dict[str, SourceSlice] = field(default_factory=dict)
    shard_of: dict[str, str] = field(default_factory=dict)

    def unique(self, name: str) -> str:
        """`name`, or `name#k` for the first k that names no node or tensor yet, nor one of the source's."""
        k, candidate = 1, name
        while candidate in self.nodes or candidate in self.tensors or candidate in self.source.nodes \
                or candidate in self.source.tensors:
            k, candidate = k + 1, f"{name}#{k}"
        return candidate

    def add_source(self, info: TensorInfo, weight: bool, origin: SourceSlice | None = None) -> str:
        """A weight or graph input (or a slice of one, `origin`) that its readers hold from the start."""
        self.tensors.setdefault(info.name, info)
        if origin is not None:
            self.slices[info.name] = origin
        (self.initializers if weight else self.inputs).setdefault(info.name, info)
        return info.name

    def add(self, node: OpNode, device: str) -> OpNode:
        """Place `node` (its outputs' infos are its `output_info`) on `device`."""
        self.nodes[node.name] = node
        self.placed[node.name] = device
        for info in node.output_info:
            self.tensors[info.name] = info
        return node

    def helper(self, op_type: str, device: str, inputs: Sequence[str], outputs: Sequence[TensorInfo],
               cost: HelperCost, base: str, **attrs: int | list[int]) -> list[str]:
        """A layout-change step on `device`, named after `base`, with the attributes its kernel
        runs it by (`placer.kernels.collectives`); gives its outputs' names."""
        name = self.unique(f"{base}/{op_type}@{device}")
        proto = helper.make_node(op_type, list(inputs), [o.name for o in outputs], name=name, domain=DOMAIN,
                                 **attrs) if self.runnable else None
        self.add(OpNode(name, op_type, DOMAIN, 1, tuple(inputs), tuple(o.name for o in outputs), proto,
                        output_info=tuple(outputs)), device)
        self.helpers[name] = cost
        return [o.name for o in outputs]

    def tensor(self, name: str, shape: Sequence[int], dtype: str) -> TensorInfo:
        """A new tensor's info, under a name no node or tensor has yet."""
        info = TensorInfo(self.unique(name), tuple(int(d) for d in shape), dtype)
        self.tensors[info.name] = info
        return info

    def param_bytes(self, inputs: Sequence[str]) -> int:
        """Bytes of the weights among `inputs`, each once (as `OpNode.param_bytes` counts them)."""
        return sum(self.initializers[t].nbytes for t in dict.fromkeys(inputs) if t in self.initializers)

    def build(self, held: Mapping[str, tuple[Layout, tuple[str, ...]]], plan_digest: str) -> Lowered:
        """The lowered graph returning what each source output's devices hold of it (`held`:
        output -> its layout and names), its placement and its helpers' prices."""
        outputs = list(dict.fromkeys(t for _, names in held.values() for t in names))
        src = self.source
        model = helper.make_model(
            helper.make_graph([n.proto for n in self.nodes.values()], f"{src.model.graph.name}-plan",
                              [_value_info(i) for i in (*self.inputs.values(), *self.initializers.values())],
                              [_value_info(self.tensors[t]) for t in outputs]),
            opset_imports=[*src.model.opset_import, helper.make_opsetid(DOMAIN, 1)]) if self.runnable \
            else onnx.ModelProto()
        sha = hashlib.sha256(f"{src.sha256}\0{plan_digest}".encode()).hexdigest()
        graph = OpGraph(model=model, nodes=dict(self.nodes), tensors=dict(self.tensors),
                        inputs=list(self.inputs.values()), outputs=[self.tensors[t] for t in outputs],
                        initializers=dict(self.initializers), opsets={**src.opsets, DOMAIN: 1}, sha256=sha,
                        dag=build_dag(self.nodes, self.tensors) if self.runnable else None,
                        source=f"{src.source} (a plan, lowered)")
        return Lowered(graph, Placement(list(self.devices), dict(self.placed), sha), dict(self.helpers),
                       dict(self.slices), dict(self.shard_of), dict(held))


def _value_info(info: TensorInfo) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(info.name, helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype)),
                                         list(info.shape))
