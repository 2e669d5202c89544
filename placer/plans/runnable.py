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
from placer.plans.lowered import DOMAIN, Lowered, SourceSlice
from placer.plans.plan import Plan
from placer.program.training import TrainingSpec


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

    def training(self, spec: TrainingSpec) -> TrainingSpec:
        """`spec` for the lowered graph: a sharded output's loss term as its pieces' terms, each
        weighted by its share of the elements (a replicated output's first copy alone), and their
        targets cut as the outputs are, so that the loss and its gradients are the source's."""
        shares, targets = [], {}
        for name, (layout, names) in self.lowered.outputs.items():
            if not isinstance(layout, Shard):   # whole copies: the first one's term alone
                copies = list(dict.fromkeys(names))
                shares += [(copy, 0.0) for copy in copies[1:]]
                if name in spec.targets:
                    targets[copies[0]] = spec.targets[name]
                continue
            total = sum(self.graph.tensors[t].numel for t in names)
            for k, piece in enumerate(names):
                shares.append((piece, self.graph.tensors[piece].numel / total))
                if name in spec.targets:
                    targets[piece] = slice_of(np.asarray(_to_numpy(spec.targets[name])),
                                              SourceSlice(name, layout, k, len(names)))
        return replace(spec, loss=replace(spec.loss, shares=tuple(shares)), targets=targets)

    def weights(self, values: Mapping[str, object], prefix: str = "updated:") -> dict[str, np.ndarray]:
        """Each source weight whole, from what a training step gives of the lowered graph's
        (`prefix` + name: its updated values, or ``grad:`` its gradients): slices joined."""
        pieces: dict[str, dict[int, np.ndarray]] = {}
        layouts: dict[str, Shard] = {}
        out = {}
        for name in self.graph.initializers:
            if prefix + name not in values:
                continue
            value = np.array(_to_numpy(values[prefix + name]))   # a copy: a live parameter changes in place
            origin = self.lowered.slices.get(name)
            if origin is None or not isinstance(origin.layout, Shard):
                out[origin.tensor if origin else name] = value
            else:
                pieces.setdefault(origin.tensor, {})[origin.k] = value
                layouts[origin.tensor] = origin.layout
        for name, held in pieces.items():
            out[name] = np.concatenate([held[k] for k in sorted(held)], layouts[name].dim)
        return out


def runnable(source: OpGraph, plan: Plan, training: bool = False) -> RunnablePlan:
    """`plan` over `source` (whose weights are loaded), lowered and made runnable; for `training`,
    with the slices of a weight also read otherwise cut from the weight itself (`_tie`)."""
    lowered = lower(source, plan)
    low = lowered.graph
    placed = dict(lowered.placement.nodes)
    nodes: dict[str, OpNode] = _tie(source, lowered, placed) if training else {}
    cut = {t for n in nodes.values() for t in n.outputs}
    weights = {name: _weight(source, name, lowered.slices.get(name)) for name in low.initializers if name not in cut}
    weights.update((n.inputs[0], source.initializer_array(n.inputs[0])) for n in nodes.values())
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
                          [v for v in low.model.graph.input if v.name not in weights and v.name not in cut],
                          list(low.model.graph.output),
                          [numpy_helper.from_array(a, t) for t, a in weights.items()]),
        opset_imports=list(low.model.opset_import))
    # the file's Constant weights (and their slices) stay literals, never trained; no node holds
    # them here, so each is keyed by its own name
    fixed = set(source.constants.values())
    constants = {t: t for t in weights if (lowered.slices[t].tensor if t in lowered.slices else t) in fixed}
    graph = replace(low, model=model, nodes=nodes, tensors=tensors, initializers=initializers,
                    dag=build_dag(nodes, tensors), constants=constants)
    return RunnablePlan(graph, replace(lowered.placement, nodes=placed), lowered)


def _tie(source: OpGraph, lowered: Lowered, placed: dict[str, str]) -> dict[str, OpNode]:
    """For a weight whose slices are not its only reading (it is read whole too, or sliced for
    more devices than one set of slices covers), a node cutting each slice from the weight itself
    on the slice's reader's device (added to `placed`): one parameter, whose gradient gathers every
    reading's, as a model's weight does. Lowering holds slices as weights of their own, which prices
    the same but trains as untied copies."""
    low, readers = lowered.graph, lowered.graph.consumers
    by_weight: dict[str, list[str]] = {}
    for name, origin in lowered.slices.items():
        if name in low.initializers and isinstance(origin.layout, Shard):
            by_weight.setdefault(origin.tensor, []).append(name)
    cuts = {}
    for weight, names in by_weight.items():
        ks = [lowered.slices[t].k for t in names]
        if weight not in low.initializers and len(ks) == len(set(ks)):
            continue   # one set of slices: each its own parameter, as tensor parallelism keeps them
        for t in names:
            origin, info = lowered.slices[t], low.tensors[t]
            start, size = piece_bounds(source.tensors[weight].shape[origin.layout.dim], origin.layout, origin.k,
                                       origin.n)
            name = f"{t}/cut"
            proto = helper.make_node("Slice", [weight], [t], name=name, domain=DOMAIN, axis=origin.layout.dim,
                                     start=start, size=size)
            cuts[name] = OpNode(name, "Slice", DOMAIN, 1, (weight,), (t,), proto, output_info=(info,))
            placed[name] = placed[readers[t][0]]
    return cuts


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
