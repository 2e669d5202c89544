"""A plan made runnable: its lowered graph (`lower`) with the values its weight slices hold, so an
engine runs it as any placed graph, and the source's feeds and outputs mapped to and from it.

Lowering prices a shard as the op itself on its slices; running it, an op whose maths reads the
whole tensor's shape must see that shape. So:

- a shard of `Shape` or `Size` (whose input is sharded but whose output is the whole tensor's
  shape, replicated) becomes a `Constant` of that shape (every shape is static once loaded);
- a shard of `Reshape` reads its own piece's shape, not the whole target shape it was given.

Everything else runs as written: a shard's inputs are its slices, and the collectives' steps run
on `placer.kernels.collectives`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import helper, numpy_helper

from placer.graph.load import build_dag
from placer.graph.opgraph import OpGraph, OpNode, TensorInfo
from placer.placement import Placement
from placer.plans.layout import Shard, piece_bounds
from placer.plans.lower import lower
from placer.plans.lowered import Lowered, SourceSlice
from placer.plans.plan import Plan


@dataclass
class RunnablePlan:
    """The lowered graph with its weights' values, its placement, and how the source's inputs and
    outputs map onto it."""

    graph: OpGraph
    placement: Placement
    lowered: Lowered

    def feeds(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The lowered graph's inputs from the source's: a sliced input gets its slice."""
        out = {}
        for info in self.graph.inputs:
            origin = self.lowered.slices.get(info.name)
            out[info.name] = feeds[info.name] if origin is None else slice_of(np.asarray(feeds[origin.tensor]), origin)
        return out

    def outputs(self, results: Mapping[str, object]) -> dict[str, np.ndarray]:
        """Each source output whole, from what its devices hold (a sharded one joined)."""
        out = {}
        for name, (layout, names) in self.lowered.outputs.items():
            pieces = [np.asarray(_to_numpy(results[t])) for t in names]
            out[name] = np.concatenate(pieces, layout.dim) if isinstance(layout, Shard) else pieces[0]
        return out


def runnable(source: OpGraph, plan: Plan) -> RunnablePlan:
    """`plan` over `source` (whose weights are loaded), lowered and made runnable."""
    lowered = lower(source, plan)
    low = lowered.graph
    nodes: dict[str, OpNode] = {}
    weights = {name: _weight(source, name, lowered.slices.get(name)) for name in low.initializers}
    for name, node in low.nodes.items():
        origin = source.nodes.get(lowered.shard_of.get(name, ""))
        if origin is not None and origin.op_type in ("Shape", "Size"):
            node = _constant(node, _whole_shape(source, origin), source.opsets.get("", 13))
        elif origin is not None and origin.op_type == "Reshape":
            shape_input = f"{name}/piece-shape"
            weights[shape_input] = np.array(node.output_info[0].shape, dtype=np.int64)
            node = _reads(node, {1: shape_input})
        nodes[name] = node
    tensors = {**low.tensors, **{t: TensorInfo(t, a.shape, str(a.dtype)) for t, a in weights.items()}}
    initializers = {t: tensors[t] for t in weights}
    model = helper.make_model(
        helper.make_graph([n.proto for n in nodes.values()], low.model.graph.name,
                          [v for v in low.model.graph.input if v.name not in weights],
                          list(low.model.graph.output),
                          [numpy_helper.from_array(a, t) for t, a in weights.items()]),
        opset_imports=list(low.model.opset_import))
    graph = replace(low, model=model, nodes=nodes, tensors=tensors, initializers=initializers,
                    dag=build_dag(nodes, tensors), constants={})
    return RunnablePlan(graph, lowered.placement, lowered)


def slice_of(array: np.ndarray, origin: SourceSlice) -> np.ndarray:
    """The slice of `array` that `origin` names (all of it for a whole copy)."""
    if not isinstance(origin.layout, Shard):
        return array
    start, size = piece_bounds(array.shape[origin.layout.dim], origin.layout, origin.k, origin.n)
    return np.ascontiguousarray(np.take(array, range(start, start + size), axis=origin.layout.dim))


def _weight(source: OpGraph, name: str, origin: SourceSlice | None) -> np.ndarray:
    return source.initializer_array(name) if origin is None else slice_of(source.initializer_array(origin.tensor),
                                                                           origin)


def _whole_shape(source: OpGraph, node: OpNode) -> np.ndarray:
    """What `node` (Shape or Size) gives on the whole of its input."""
    shape = source.tensors[node.inputs[0]].shape
    if node.op_type == "Size":
        return np.array(int(np.prod(shape)), dtype=np.int64)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.proto.attribute}
    return np.array(shape[attrs.get("start", 0):attrs.get("end", len(shape))], dtype=np.int64)


def _constant(node: OpNode, value: np.ndarray, opset: int) -> OpNode:
    """`node` as a Constant of `value`, reading nothing."""
    proto = helper.make_node("Constant", [], list(node.outputs), name=node.name,
                             value=numpy_helper.from_array(value))
    return replace(node, op_type="Constant", domain="", opset=opset, inputs=(), proto=proto, flops=0.0,
                   implicit_inputs=())


def _reads(node: OpNode, changes: Mapping[int, str]) -> OpNode:
    """`node` reading `changes[i]` as its input i."""
    inputs = tuple(changes.get(i, t) for i, t in enumerate(node.inputs))
    proto = onnx.NodeProto()
    proto.CopyFrom(node.proto)
    for i, t in changes.items():
        proto.input[i] = t
    return replace(node, inputs=inputs, proto=proto)


def _to_numpy(value: object) -> np.ndarray:
    to_numpy = getattr(value, "numpy", None)
    return value.detach().cpu().numpy() if to_numpy is not None else np.asarray(value)
