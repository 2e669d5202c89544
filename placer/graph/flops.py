"""FLOP estimates of one forward step of an ONNX node, from its static shapes.

A multiply-add counts as 2 FLOPs. Heavy ops get their textbook counts; element-wise ops and
reductions count one FLOP per element; pure data movement (Reshape, Transpose, Gather, ...)
counts 0. Control-flow ops count their subgraphs (`placer.graph.control_flow.node_cost`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import onnx
from onnx import helper

from placer.graph.opgraph import TensorInfo

# One FLOP per output element.
ELEMENTWISE = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "BitwiseAnd",
    "BitwiseNot", "BitwiseOr", "BitwiseXor", "Ceil", "Celu", "Clip", "Cos", "Cosh", "Div", "Elu", "Equal",
    "Erf", "Exp", "Floor", "Gelu", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "IsInf",
    "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Log", "Max", "Mean", "Min", "Mish", "Mod", "Mul", "Neg",
    "Not", "Or", "PRelu", "Pow", "Reciprocal", "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign",
    "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu",
    "Where", "Xor", "Cast", "CastLike", "DequantizeLinear", "QuantizeLinear", "Dropout", "Trilu",
})

# One FLOP per input element.
REDUCTIONS = frozenset({
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
    "ReduceProd", "ReduceSum", "ReduceSumSquare", "ArgMax", "ArgMin", "GlobalAveragePool", "GlobalMaxPool",
    "GlobalLpPool", "CumSum", "TopK",
})

# FLOPs per input element of normalisations (mean, variance, scale and shift).
NORMALISATIONS = {
    "BatchNormalization": 2, "InstanceNormalization": 5, "LayerNormalization": 5,
    "GroupNormalization": 5, "MeanVarianceNormalization": 5, "LpNormalization": 3, "LRN": 5,
    "Softmax": 5, "LogSoftmax": 5, "Hardmax": 2, "RMSNormalization": 4,
}


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def _conv(node, ins, outs) -> float:
    x, w, y = ins[0], ins[1], outs[0]
    if x is None or w is None or y is None:
        return 0.0
    # W is (C_out, C_in/group, k...): each output element is a dot product over C_in/group * k.
    per_output = _numel(w.shape[1:])
    flops = 2.0 * _numel(y.shape) * per_output
    if len(ins) > 2 and ins[2] is not None:
        flops += _numel(y.shape)
    return flops


def _conv_transpose(node, ins, outs) -> float:
    x, w = ins[0], ins[1]
    if x is None or w is None:
        return 0.0
    # W is (C_in, C_out/group, k...): every input element scatters into C_out/group * k outputs.
    flops = 2.0 * _numel(x.shape) * _numel(w.shape[1:])
    if len(ins) > 2 and ins[2] is not None and outs[0] is not None:
        flops += _numel(outs[0].shape)
    return flops


def _gemm(node, ins, outs) -> float:
    a, y = ins[0], outs[0]
    if a is None or y is None or len(a.shape) != 2:
        return 0.0
    k = a.shape[0] if _attr(node, "transA", 0) else a.shape[1]
    flops = 2.0 * _numel(y.shape) * k
    if len(ins) > 2 and ins[2] is not None:
        flops += _numel(y.shape)
    return flops


def _matmul(node, ins, outs) -> float:
    a, y = ins[0], outs[0]
    if a is None or y is None or not a.shape:
        return 0.0
    return 2.0 * _numel(y.shape) * a.shape[-1]


def _recurrent(gates: int) -> Callable:
    def count(node, ins, outs) -> float:
        x, w = ins[0], ins[1]
        if x is None or w is None:
            return 0.0
        layout = _attr(node, "layout", 0)
        seq, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])
        directions, rows, input_size = w.shape          # W is (dirs, gates*hidden, input)
        hidden = rows // gates
        # Per step and direction: input and recurrent matmuls for every gate, plus the gate
        # non-linearities and the state update (a few element-wise ops per hidden unit).
        per_step = 2.0 * gates * hidden * (input_size + hidden) + 8.0 * gates * hidden
        return float(seq * directions * batch * per_step)
    return count


def _pool(node, ins, outs) -> float:
    y = outs[0]
    if y is None:
        return 0.0
    return float(_numel(y.shape) * _numel(tuple(_attr(node, "kernel_shape", []))))


def _einsum(node, ins, outs) -> float:
    equation = (_attr(node, "equation", b"") or b"")
    equation = equation.decode() if isinstance(equation, bytes) else equation
    lhs = equation.replace(" ", "").split("->")[0].split(",")
    sizes: dict[str, int] = {}
    for term, info in zip(lhs, ins):
        if info is None or "." in term:
            return float(sum(_numel(o.shape) for o in outs if o is not None))
        for letter, size in zip(term, info.shape):
            sizes[letter] = max(sizes.get(letter, 1), size)
    return 2.0 * math.prod(sizes.values())


_COUNTERS: dict[str, Callable] = {
    "Conv": _conv, "ConvInteger": _conv, "QLinearConv": _conv,
    "ConvTranspose": _conv_transpose,
    "Gemm": _gemm, "MatMul": _matmul, "MatMulInteger": _matmul,
    "LSTM": _recurrent(4), "GRU": _recurrent(3), "RNN": _recurrent(1),
    "MaxPool": _pool, "AveragePool": _pool, "LpPool": _pool,
    "Einsum": _einsum,
}


def node_flops(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> float:
    """Estimated FLOPs of `node` given every tensor's static info."""
    ins = [tensors.get(n) if n else None for n in node.input]
    outs = [tensors.get(n) if n else None for n in node.output]
    op = node.op_type
    if op in _COUNTERS:
        return float(_COUNTERS[op](node, ins, outs))
    if op in ELEMENTWISE or op in ("Resize", "Upsample"):
        return float(sum(_numel(o.shape) for o in outs if o is not None))
    if op in REDUCTIONS:
        return float(_numel(ins[0].shape)) if ins and ins[0] is not None else 0.0
    if op in NORMALISATIONS:
        return float(NORMALISATIONS[op] * _numel(ins[0].shape)) if ins and ins[0] is not None else 0.0
    return 0.0
