"""The splits an op's maths allows: for n devices, a layout of each input and each output under
which every device computes its own piece with the op itself, as DTensor's sharding rules say.

- MatMul (numpy semantics, both operands at least 2-D): `Shard(0) x Replicate -> Shard(0)` splits
  the rows (data parallel: the batch), `Replicate x Shard(-1) -> Shard(-1)` the output features,
  `Shard(-1) x Shard(-2) -> Partial` the reduced axis; each leading batch axis (attention's heads)
  too. Gemm alike, through its transposes, with its bias C following the output where it spans it.
- Conv (one group for the channel splits): the batch, the output channels (`W` and `B` sharded on
  axis 0), or the input channels without a bias (`-> Partial`).
- Element-wise ops follow their input: the output sharded on any axis, each input on the axis
  numpy broadcasting maps there, or replicated where it is broadcast along it. Ops that act along
  some axes (softmax, normalisations, pooling, concatenation, split) likewise on the other axes.
- Ops that move axes map them: Transpose, Gather, (Un)Squeeze with constant axes, and Flatten and
  Reshape where they keep axis 0 (the batch). Given the device count n, Reshape also maps an axis
  it splits or merges as a leading factor (hidden -> heads x head_dim and back; the batch with the
  steps after it, batch x steps -> rows and back), where n divides both lengths, so that device k's
  contiguous block is the same elements on both sides; given an uneven cut's parts, the batch's
  reshapes wherever device k's slices hold the same elements under those parts.
- Shape and Size read only metadata, so they take a sharded input and give a replicated output.

Only axes longer than 1 are offered. Every op may also be replicated: each device computes all of
it (`replicated`), which is no split but is always allowed. No split reads a `Partial` input: a
sum's parts are reduced before any op reads them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from onnx import helper, numpy_helper

from placer.graph.opgraph import OpGraph, OpNode
from placer.plans.layout import PARTIAL, REPLICATE, Layout, Shard, shard_sizes


@dataclass(frozen=True)
class Split:
    """One way to divide an op: a layout per input position ('' ones Replicate) and per output."""

    name: str
    inputs: tuple[Layout, ...]
    outputs: tuple[Layout, ...]


def replicated(node: OpNode) -> Split:
    """Every device computes the whole op from whole inputs."""
    return Split("replicate", (REPLICATE,) * len(node.inputs), (REPLICATE,) * len(node.outputs))


def splits(node: OpNode, graph: OpGraph, n: int | None = None, parts: tuple[int, ...] | None = None) -> list[Split]:
    """The splits of `node` over several devices that its maths allows (replication aside); given
    the device count `n` (and the `parts` an uneven cut gives them), also those that hold only for
    it (`_reshape`'s)."""
    if node.domain not in ("", "ai.onnx") or any(t and t not in graph.tensors for t in node.inputs):
        return []
    rule = _RULES.get(node.op_type)
    if rule is None:
        return []
    return [s for s in rule(node, _Shapes(node, graph, n, parts)) if len(s.inputs) == len(node.inputs)]


class _Shapes:
    """The node's input and output shapes (None for an omitted input) and its attributes."""

    def __init__(self, node: OpNode, graph: OpGraph, n: int | None = None,
                 parts: tuple[int, ...] | None = None) -> None:
        self.node, self.n, self.parts = node, n, parts
        self.ins = [graph.tensors[t].shape if t else None for t in node.inputs]
        self.outs = [info.shape for info in node.output_info]
        self.graph = graph

    def attr(self, name: str, default=None):
        for a in self.node.proto.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    def axes(self) -> list[int] | None:
        """Unsqueeze's and Squeeze's axes: an attribute before opset 13, then a constant input."""
        if self.node.opset < 13:
            return self.attr("axes")
        if len(self.node.inputs) < 2 or not self.node.inputs[1]:
            return None
        value = constant_value(self.graph, self.node.inputs[1])
        return None if value is None else [int(a) for a in np.atleast_1d(value)]

    @property
    def out(self) -> tuple[int, ...]:
        return self.outs[0]

    def split(self, name: str, ins: dict[int, Layout], out: Layout | Sequence[Layout]) -> Split:
        """A split with `ins` (position -> layout; others Replicate) and `out` for every output."""
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,) * len(self.outs)
        return Split(name, tuple(ins.get(i, REPLICATE) for i in range(len(self.ins))), outs)


def constant_value(graph: OpGraph, tensor: str) -> np.ndarray | None:
    """The value of a weight or of a Constant node's output; None for anything computed."""
    if tensor in graph.initializers:
        return graph.initializer_array(tensor)
    producer = graph.nodes.get(graph.producer.get(tensor, ""))
    if producer is not None and producer.op_type == "Constant":
        value = next((a for a in producer.proto.attribute if a.name == "value"), None)
        return None if value is None else numpy_helper.to_array(value.t)
    return None


def _broadcast_layout(shape: tuple[int, ...] | None, out: tuple[int, ...], d: int) -> Layout:
    """An input's layout when the output is Shard(d), by numpy broadcasting: sharded on the axis
    that d maps to where the input spans it, else replicated (it is broadcast along d)."""
    if shape is None:
        return REPLICATE
    a = d - (len(out) - len(shape))
    return Shard(a) if a >= 0 and shape[a] == out[d] else REPLICATE


def _follow(s: _Shapes, axes: Sequence[int], inputs: Sequence[int] | None = None) -> list[Split]:
    """For each output axis in `axes` longer than 1: every output Shard(axis), the `inputs`
    positions (default: all) by broadcasting, the others replicated."""
    positions = range(len(s.ins)) if inputs is None else inputs
    return [s.split(f"axis {d}", {i: _broadcast_layout(s.ins[i], s.out, d) for i in positions}, Shard(d))
            for d in axes if s.out[d] > 1 and all(len(o) == len(s.out) for o in s.outs)]


def _all_axes(s: _Shapes) -> range:
    return range(len(s.out)) if s.outs else range(0)


def _elementwise(node: OpNode, s: _Shapes) -> list[Split]:
    return _follow(s, _all_axes(s))


def _softmax(node: OpNode, s: _Shapes) -> list[Split]:
    """Since opset 13 along `axis` alone; before, over every axis from `axis` (default 1) on."""
    r = len(s.out)
    axis = s.attr("axis", -1 if node.opset >= 13 else 1)
    axis = axis + r if axis < 0 else axis
    return _follow(s, [d for d in range(r) if d != axis] if node.opset >= 13 else range(axis), inputs=[0])


def _layer_norm(node: OpNode, s: _Shapes) -> list[Split]:
    """Normalises over every axis from `axis` on: the axes before it, its scale and bias replicated."""
    axis = s.attr("axis", -1)
    return _follow(s, range(axis + len(s.out) if axis < 0 else axis), inputs=[0])


def _batch_norm(node: OpNode, s: _Shapes) -> list[Split]:
    if len(s.outs) != 1:   # training mode's running statistics mix the batch
        return []
    axes = [d for d in range(len(s.out)) if d != 1]
    channels = [s.split("channels", {0: Shard(1), **{i: Shard(0) for i in range(1, 5)}}, Shard(1))] \
        if len(s.out) > 1 and s.out[1] > 1 else []
    return _follow(s, axes, inputs=[0]) + channels


def _per_channel(batch_only: bool):
    """Pooling (per sample and channel) and LRN (per sample): the batch and, for pooling, the channels."""
    def rule(node: OpNode, s: _Shapes) -> list[Split]:
        if len([o for o in node.outputs if o]) != 1:   # MaxPool's indices count over the whole tensor
            return []
        return _follow(s, [0] if batch_only else [0, 1], inputs=[0])
    return rule


def _conv(node: OpNode, s: _Shapes) -> list[Split]:
    x, w = s.ins[0], s.ins[1]
    if x is None or w is None:
        return []
    has_bias = len(s.ins) > 2 and s.ins[2] is not None
    out = []
    if s.out[0] > 1:
        out.append(s.split("batch", {0: Shard(0)}, Shard(0)))
    if s.attr("group", 1) == 1:
        if w[0] > 1:
            out.append(s.split("output channels", {1: Shard(0), **({2: Shard(0)} if has_bias else {})}, Shard(1)))
        if w[1] > 1 and not has_bias:
            out.append(s.split("input channels", {0: Shard(1), 1: Shard(1)}, PARTIAL))
    return out


def _matmul(node: OpNode, s: _Shapes) -> list[Split]:
    a, b = s.ins[0], s.ins[1]
    if a is None or b is None or len(a) < 2 or len(b) < 2:
        return []
    ra, rb, ro = len(a), len(b), len(s.out)
    out = []
    for d in range(ro - 2):   # batch axes (attention's heads): each operand that spans it follows
        if s.out[d] > 1:
            layouts = {0: _broadcast_layout(a[:-2], s.out[:-2], d), 1: _broadcast_layout(b[:-2], s.out[:-2], d)}
            out.append(s.split(f"batch axis {d}", layouts, Shard(d)))
    if a[-2] > 1:
        out.append(s.split("rows", {0: Shard(ra - 2)}, Shard(ro - 2)))
    if b[-1] > 1:
        out.append(s.split("columns", {1: Shard(rb - 1)}, Shard(ro - 1)))
    if a[-1] > 1:
        out.append(s.split("reduced axis", {0: Shard(ra - 1), 1: Shard(rb - 2)}, PARTIAL))
    return out


def _gemm(node: OpNode, s: _Shapes) -> list[Split]:
    a, b = s.ins[0], s.ins[1]
    c = s.ins[2] if len(s.ins) > 2 else None
    if a is None or b is None:
        return []
    trans_a, trans_b = s.attr("transA", 0), s.attr("transB", 0)
    m, n = s.out
    out = []
    if m > 1:
        bias = {2: Shard(0)} if c is not None and len(c) == 2 and c[0] == m else {}
        out.append(s.split("rows", {0: Shard(1 if trans_a else 0), **bias}, Shard(0)))
    if n > 1:
        bias = {2: Shard(len(c) - 1)} if c is not None and len(c) >= 1 and c[-1] == n else {}
        out.append(s.split("columns", {1: Shard(0 if trans_b else 1), **bias}, Shard(1)))
    if c is None and a[0 if trans_a else 1] > 1:   # a bias would be added once per part
        out.append(s.split("reduced axis", {0: Shard(0 if trans_a else 1), 1: Shard(1 if trans_b else 0)}, PARTIAL))
    return out


def _flatten(node: OpNode, s: _Shapes) -> list[Split]:
    x = s.ins[0]
    axis = s.attr("axis", 1)
    axis = axis + len(x) if axis < 0 else axis
    # sample k's rows stay together only where nothing between axis 0 and `axis` multiplies them
    ok = axis >= 1 and math.prod(x[1:axis]) == 1 and s.out[0] > 1
    return [s.split("axis 0", {0: Shard(0)}, Shard(0))] if ok else []


def _reshape(node: OpNode, s: _Shapes) -> list[Split]:
    # row-major: a reshape that keeps axis 0's length maps sample k to sample k; one that changes it
    # (the batch merged with the axes after it, or cut) maps device k's slice of axis 0 to its own
    # slice where both hold the same run of elements (evenly cut: where n divides both lengths)
    x, out = s.ins[0], s.out
    keeps = x and out and x[0] == out[0] > 1
    merges = x and out and x[0] != out[0] and min(x[0], out[0]) > 1 and _same_runs(x, out, s.n, s.parts)
    return ([s.split("axis 0", {0: Shard(0)}, Shard(0))] if keeps or merges else []) + _reshape_blocks(s)


def _same_runs(x: tuple[int, ...], out: tuple[int, ...], n: int | None, parts: tuple[int, ...] | None) -> bool:
    """Whether device k's slice of axis 0 of `x` and of `out` (n slices, cut by `parts` where given)
    hold the same elements in row-major order, for every k."""
    if not n or n < 2:
        return False
    size = math.prod(x)
    per_x, per_out = size // x[0], size // out[0]
    return ([k * per_x for k in shard_sizes(x[0], n, parts)] ==
            [k * per_out for k in shard_sizes(out[0], n, parts)])


def _reshape_blocks(s: _Shapes) -> list[Split]:
    """Input axis a to output axis d (not axis 0) where the axes before them hold as many elements:
    then each index of those axes owns one run of elements on both sides, and where n divides both
    lengths device k's n-th of axis a is the k-th n-th of that run, as its n-th of axis d is."""
    x, out, n = s.ins[0], s.out, s.n
    if not x or not out or not n or n < 2:
        return []
    return [s.split(f"axis {a} as {d}", {0: Shard(a)}, Shard(d))
            for a in range(1, len(x)) for d in range(1, len(out))
            if math.prod(x[:a]) == math.prod(out[:d]) and x[a] % n == 0 and out[d] % n == 0
            and x[a] > 1 and out[d] > 1]


def _concat(node: OpNode, s: _Shapes) -> list[Split]:
    axis = s.attr("axis")
    axis = axis + len(s.out) if axis < 0 else axis
    return _follow(s, [d for d in _all_axes(s) if d != axis])


def _split_op(node: OpNode, s: _Shapes) -> list[Split]:
    axis = s.attr("axis", 0)
    axis = axis + len(s.ins[0]) if axis < 0 else axis
    return _follow(s, [d for d in range(len(s.ins[0])) if d != axis], inputs=[0])


def _transpose(node: OpNode, s: _Shapes) -> list[Split]:
    perm = s.attr("perm") or list(reversed(range(len(s.out))))
    return [s.split(f"axis {d}", {0: Shard(perm[d])}, Shard(d)) for d in range(len(s.out)) if s.out[d] > 1]


def _gather(node: OpNode, s: _Shapes) -> list[Split]:
    data, indices = s.ins[0], s.ins[1]
    axis = s.attr("axis", 0)
    axis = axis + len(data) if axis < 0 else axis
    out = []
    for d in range(len(s.out)):
        if s.out[d] <= 1:
            continue
        if axis <= d < axis + len(indices):   # an axis of the indices: each device gathers its own
            out.append(s.split(f"axis {d}", {1: Shard(d - axis)}, Shard(d)))
        else:                                 # an axis of the data kept whole by the gather
            out.append(s.split(f"axis {d}", {0: Shard(d if d < axis else d - len(indices) + 1)}, Shard(d)))
    return out


def _unsqueeze(node: OpNode, s: _Shapes) -> list[Split]:
    axes = s.axes()
    if axes is None:
        return []
    kept = [d for d in range(len(s.out)) if d not in {a + len(s.out) if a < 0 else a for a in axes}]
    return [s.split(f"axis {d}", {0: Shard(kept.index(d))}, Shard(d)) for d in kept if s.out[d] > 1]


def _squeeze(node: OpNode, s: _Shapes) -> list[Split]:
    x, axes = s.ins[0], s.axes()
    if axes is None and len(s.ins) > 1 and s.ins[1] is not None:
        return []
    gone = {a + len(x) if a < 0 else a for a in axes} if axes is not None else {a for a, n in enumerate(x) if n == 1}
    kept = [a for a in range(len(x)) if a not in gone]
    return [s.split(f"axis {d}", {0: Shard(a)}, Shard(d)) for d, a in enumerate(kept) if s.out[d] > 1]


def _metadata(node: OpNode, s: _Shapes) -> list[Split]:
    x = s.ins[0]
    return [s.split(f"axis {d}", {0: Shard(d)}, REPLICATE) for d in range(len(x)) if x[d] > 1]


ELEMENTWISE = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "Cast", "Ceil", "Celu",
    "Clip", "Cos", "Cosh", "Div", "Dropout", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu", "Greater",
    "GreaterOrEqual", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Less", "LessOrEqual",
    "Log", "Max", "Mean", "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "Pow", "PRelu", "Reciprocal", "Relu",
    "Round", "Selu", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Tan", "Tanh",
    "ThresholdedRelu", "Where", "Xor"})

_RULES: dict[str, Callable[[OpNode, _Shapes], list[Split]]] = {
    **{op: _elementwise for op in ELEMENTWISE},
    "Softmax": _softmax, "LogSoftmax": _softmax, "Hardmax": _softmax, "LayerNormalization": _layer_norm,
    "BatchNormalization": _batch_norm, "LRN": _per_channel(batch_only=True),
    **{op: _per_channel(batch_only=False) for op in ("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool",
                                                      "GlobalMaxPool", "GlobalLpPool")},
    "Conv": _conv, "MatMul": _matmul, "Gemm": _gemm, "Flatten": _flatten, "Reshape": _reshape,
    "Concat": _concat, "Split": _split_op, "Transpose": _transpose, "Gather": _gather,
    "Shape": _metadata, "Size": _metadata, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze,
}
