"""Fold the small integer computations exporters build shapes with (Shape -> Gather -> Unsqueeze
-> Concat -> Reshape, Range over a dimension, ...) into constants, so that ONNX shape inference
can see the shapes they produce. ONNX's own data propagation stops at many of these (a scalar
Gather, a Cast, a Range); evaluating them is cheap because they only touch a few numbers."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from placer.graph.opgraph import TensorInfo
from placer.graph.structure import STANDARD_DOMAINS

log = logging.getLogger(__name__)

# Outputs larger than this are never folded: shape arithmetic is small, activations are not.
FOLD_LIMIT = 4096

FOLDABLE = frozenset({
    "Abs", "Add", "And", "Cast", "Ceil", "Concat", "Constant", "ConstantOfShape", "Div", "Equal",
    "Expand", "Flatten", "Floor", "Gather", "GatherElements", "Greater", "GreaterOrEqual", "Identity",
    "Less", "LessOrEqual", "Max", "Min", "Mod", "Mul", "Neg", "Not", "Or", "Range", "ReduceMax",
    "ReduceMin", "ReduceProd", "ReduceSum", "Reshape", "ScatterND", "Shape", "Sign", "Size", "Slice",
    "Sqrt", "Squeeze", "Sub", "Tile", "Transpose", "Unsqueeze", "Where",
})


def _shape_value(node: onnx.NodeProto, info: TensorInfo) -> np.ndarray:
    start, end = 0, None
    for a in node.attribute:
        if a.name == "start":
            start = a.i
        elif a.name == "end":
            end = a.i
    return np.array(info.shape[start:end] if end is not None else info.shape[start:], dtype=np.int64)


def evaluate_node(node: onnx.NodeProto, inputs: list[np.ndarray | None], opsets: Mapping[str, int]) -> list[np.ndarray]:
    """The outputs of one standard node on numpy inputs (ONNX's reference evaluator, at the model's opsets)."""
    from onnx.reference import ReferenceEvaluator

    if node.op_type == "Constant":
        for a in node.attribute:
            if a.name == "value":
                return [numpy_helper.to_array(a.t)]
    feeds = {name: value for name, value in zip(node.input, inputs) if name}
    # A bare NodeProto would be evaluated at the newest opset; a function carries the model's.
    function = helper.make_function(
        "placer.fold", "fold", [n for n in dict.fromkeys(node.input) if n], [o for o in node.output if o],
        [node], opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items() if d != "ai.onnx"])
    evaluator = ReferenceEvaluator(function)
    return [np.asarray(v) for v in evaluator.run(None, feeds, attributes={})]


_BROADCASTING = frozenset({"Add", "And", "Div", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual",
                           "Max", "Min", "Mod", "Mul", "Or", "Sub", "Where"})


def _output_too_big(node: onnx.NodeProto, inputs: list[np.ndarray | None]) -> bool:
    """Whether a node that makes big tensors from small ones would exceed FOLD_LIMIT; checked
    before evaluating, so that folding never allocates an activation-sized array."""
    try:
        op = node.op_type
        if op == "ConstantOfShape":
            size = int(np.prod(inputs[0], dtype=np.int64))
        elif op == "Expand":
            size = int(np.prod(np.broadcast_shapes(inputs[0].shape, tuple(int(d) for d in inputs[1])), dtype=np.int64))
        elif op == "Tile":
            size = int(np.prod(np.array(inputs[0].shape) * inputs[1], dtype=np.int64))
        elif op == "Range":
            start, limit, delta = (float(np.asarray(v)) for v in inputs[:3])
            size = int(max(np.ceil((limit - start) / delta), 0)) if delta else FOLD_LIMIT + 1
        elif op in _BROADCASTING:
            size = int(np.prod(np.broadcast_shapes(*(v.shape for v in inputs if v is not None)), dtype=np.int64))
        else:
            return False
    except (ValueError, TypeError, IndexError, AttributeError):
        return False  # malformed: let the evaluator refuse it
    return size > FOLD_LIMIT


def fold_constants(model: onnx.ModelProto, infos: Mapping[str, TensorInfo],
                   opsets: Mapping[str, int]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A copy of `model` in which every foldable node whose inputs are known (initializers,
    Constants, Shapes of tensors with static shapes in `infos`) is replaced by initializers of
    its outputs; also returns the folded values. The copy serves shape inference only."""
    values: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
                                     if np.prod(t.dims, dtype=np.int64) <= FOLD_LIMIT}
    folded: dict[str, np.ndarray] = {}
    keep: list[onnx.NodeProto] = []
    for node in model.graph.node:
        outputs = _fold_node(node, values, infos, opsets)
        if outputs is None:
            keep.append(node)
            continue
        for name, value in zip(node.output, outputs):
            if name:
                values[name] = folded[name] = value
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    result.graph.node.extend(keep)
    del result.graph.value_info[:]
    result.graph.initializer.extend(numpy_helper.from_array(v, name) for name, v in folded.items())
    return result, folded


def _fold_node(node: onnx.NodeProto, values: dict[str, np.ndarray], infos: Mapping[str, TensorInfo],
               opsets: Mapping[str, int]) -> list[np.ndarray] | None:
    if node.domain not in STANDARD_DOMAINS or node.op_type not in FOLDABLE:
        return None
    if node.op_type in ("Shape", "Size"):
        info = infos.get(node.input[0])
        if info is None:
            return None
        if node.op_type == "Size":
            return [np.array(info.numel, dtype=np.int64)]
        return [_shape_value(node, info)]
    if any(name and name not in values for name in node.input):
        return None
    if _output_too_big(node, [values.get(n) if n else None for n in node.input]):
        return None
    try:
        outputs = evaluate_node(node, [values.get(n) if n else None for n in node.input], opsets)
    except Exception as exc:  # anything the reference cannot do stays for inference or the real run
        log.debug("not folding %s (%s): %s", node.name, node.op_type, exc)
        return None
    if any(np.asarray(o).size > FOLD_LIMIT or np.asarray(o).dtype == object for o in outputs):
        return None
    return outputs
