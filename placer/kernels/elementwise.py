"""Element-wise kernels: arithmetic, comparisons, logic, math functions, Clip, Where, Cast."""

from __future__ import annotations

import functools
import math

import torch

from placer.kernels.dtypes import FLOAT8, to_float8, torch_dtype
from placer.kernels.registry import Node, register

_UNARY = {
    "Abs": torch.abs, "Neg": torch.neg, "Sqrt": torch.sqrt, "Exp": torch.exp, "Log": torch.log,
    "Reciprocal": torch.reciprocal, "Floor": torch.floor, "Ceil": torch.ceil,
    "Round": torch.round,  # round half to even, as ONNX asks
    "Sign": torch.sign, "Erf": torch.erf, "Not": torch.logical_not,
    "Sin": torch.sin, "Cos": torch.cos, "Tan": torch.tan, "Asin": torch.asin, "Acos": torch.acos,
    "Atan": torch.atan, "Sinh": torch.sinh, "Cosh": torch.cosh, "Asinh": torch.asinh,
    "Acosh": torch.acosh, "Atanh": torch.atanh, "IsNaN": torch.isnan, "BitwiseNot": torch.bitwise_not,
}


def _unary(node: Node):
    op = _UNARY[node.op_type]
    return lambda xs: [op(xs[0])]


for _name in _UNARY:
    register(_name)(_unary)


@register("IsInf", since=10)
def _isinf(node: Node):
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    if pos and neg:
        return lambda xs: [torch.isinf(xs[0])]
    if pos:
        return lambda xs: [torch.isposinf(xs[0])]
    if neg:
        return lambda xs: [torch.isneginf(xs[0])]
    return lambda xs: [torch.zeros_like(xs[0], dtype=torch.bool)]


def _int_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # ONNX integer Div truncates toward zero (C semantics), torch's `/` would promote to float.
    return torch.div(a, b, rounding_mode="trunc")


@register("Add", "Sub", "Mul", "Div", since=7)
def _arith(node: Node):
    if node.op_type == "Add":
        return lambda xs: [torch.add(xs[0], xs[1])]
    if node.op_type == "Sub":
        return lambda xs: [torch.sub(xs[0], xs[1])]
    if node.op_type == "Mul":
        return lambda xs: [torch.mul(xs[0], xs[1])]

    def div(xs):
        a, b = xs
        if a.dtype.is_floating_point or a.dtype.is_complex:
            return [torch.div(a, b)]
        return [_int_div(a, b)]
    return div


@register("Add", "Sub", "Mul", "Div", "Pow", since=1)
def _arith_legacy(node: Node):
    """Before opset 7: B broadcast only when `broadcast` is set, aligned at `axis` if given."""
    return _legacy_broadcast(node, _pow(node) if node.op_type == "Pow" else _arith(node))


def _legacy_broadcast(node: Node, fn):
    axis = node.attr("axis")
    if not node.attr("broadcast", 0) or axis is None:
        return fn

    def legacy(xs):
        a, b = xs
        start = axis + a.dim() if axis < 0 else axis
        shape = [1] * start + list(b.shape) + [1] * (a.dim() - start - b.dim())
        return fn([a, b.reshape(shape)])
    return legacy


@register("Pow", since=7)
def _pow(node: Node):
    def pow_(xs):
        a, b = xs
        if a.is_floating_point() and b.dtype in (torch.uint16, torch.uint32, torch.uint64):
            b = b.to(a.dtype)   # the base's gradient computes b - 1, which torch cannot in these types
        y = torch.pow(a, b)
        # ONNX Pow keeps the base's type (an int base with a float exponent stays int).
        return [y if y.dtype == a.dtype else y.to(a.dtype)]
    return pow_


@register("Mod", since=10)
def _mod(node: Node):
    if node.attr("fmod", 0):
        return lambda xs: [torch.fmod(xs[0], xs[1])]
    return lambda xs: [torch.remainder(xs[0], xs[1])]


_COMPARE = {"Equal": torch.eq, "Less": torch.lt, "LessOrEqual": torch.le, "Greater": torch.gt,
            "GreaterOrEqual": torch.ge, "And": torch.logical_and, "Or": torch.logical_or,
            "Xor": torch.logical_xor, "BitwiseAnd": torch.bitwise_and,
            "BitwiseOr": torch.bitwise_or, "BitwiseXor": torch.bitwise_xor}


@register(*_COMPARE, since=7)
def _compare(node: Node):
    op = _COMPARE[node.op_type]
    return lambda xs: [op(xs[0], xs[1])]


@register("Equal", "Less", "Greater", "And", "Or", "Xor", since=1)
def _compare_legacy(node: Node):
    """Before opset 7: the legacy `broadcast`/`axis` attributes, as for arithmetic."""
    return _legacy_broadcast(node, _compare(node))


@register("BitShift", since=11)
def _bitshift(node: Node):
    if node.attr("direction") == "LEFT":
        return lambda xs: [torch.bitwise_left_shift(xs[0], xs[1])]
    return lambda xs: [torch.bitwise_right_shift(xs[0], xs[1])]


@register("Min", "Max", "Sum", "Mean", since=1)   # before 6: consumed_inputs only
def _variadic(node: Node):
    op = {"Min": torch.minimum, "Max": torch.maximum, "Sum": torch.add, "Mean": torch.add}[node.op_type]
    mean = node.op_type == "Mean"

    def run(xs):
        y = functools.reduce(op, xs) if len(xs) > 1 else xs[0]
        return [y / len(xs) if mean else y]
    return run


@register("Clip", since=1)   # before 6: consumed_inputs only
def _clip6(node: Node):
    lo, hi = node.attr("min", -math.inf), node.attr("max", math.inf)
    return lambda xs: [torch.clamp(xs[0], lo, hi)]


@register("Clip", since=11)
def _clip11(node: Node):
    def clip(xs):
        x = xs[0]
        lo = xs[1] if len(xs) > 1 else None
        hi = xs[2] if len(xs) > 2 else None
        if lo is None and hi is None:
            return [x]
        # clamp with a tensor bound needs the same dtype; 0-d bounds broadcast without a sync.
        lo = None if lo is None else lo.to(x.dtype)
        hi = None if hi is None else hi.to(x.dtype)
        return [torch.clamp(x, lo, hi)]
    return clip


@register("Where", since=9)
def _where(node: Node):
    return lambda xs: [torch.where(xs[0], xs[1], xs[2])]


def _cast_to(x: torch.Tensor, dtype: torch.dtype, saturate: bool) -> torch.Tensor:
    if dtype in FLOAT8 and x.dtype.is_floating_point:
        return to_float8(x, dtype, saturate)
    return x.to(dtype)


@register("Cast", since=6)
def _cast(node: Node):
    dtype, saturate = torch_dtype(node.attr("to")), bool(node.attr("saturate", 1))
    if dtype in FLOAT8:
        return lambda xs: [_cast_to(xs[0], dtype, saturate)]
    return lambda xs: [xs[0].to(dtype)]


@register("CastLike", since=15)
def _castlike(node: Node):
    saturate = bool(node.attr("saturate", 1))
    return lambda xs: [_cast_to(xs[0], xs[1].dtype, saturate)]


@register("Identity", since=1)
def _identity(node: Node):
    return lambda xs: [xs[0]]


@register("Dropout", since=1)   # before 7: is_test/consumed_inputs only
def _dropout(node: Node):
    """Inference: identity, and an all-true mask when the mask output is asked for."""
    if node.attr("training_mode", 0):
        raise NotImplementedError("training-mode Dropout is not supported")
    if node.n_outputs > 1:
        return lambda xs: [xs[0], torch.ones_like(xs[0], dtype=torch.bool)]
    return lambda xs: [xs[0]]


@register("Dropout", since=12, host_inputs=(1, 2))
def _dropout12(node: Node):
    """ratio and training_mode became inputs: identity unless training_mode is true."""
    seed = node.attr("seed")
    gen = None
    if seed is not None:
        gen = torch.Generator()
        gen.manual_seed(int(seed))
    want_mask = node.n_outputs > 1

    def dropout(xs):
        x = xs[0]
        training = len(xs) > 2 and xs[2] is not None and bool(xs[2].reshape(-1).tolist()[0])
        if not training:
            return [x, torch.ones_like(x, dtype=torch.bool)] if want_mask else [x]
        ratio = float(xs[1].reshape(-1).tolist()[0]) if len(xs) > 1 and xs[1] is not None else 0.5
        keep = torch.rand(x.shape, generator=gen).to(x.device) >= ratio
        y = torch.where(keep, x / (1 - ratio), torch.zeros_like(x)) if ratio < 1 else torch.zeros_like(x)
        return [y, keep] if want_mask else [y]
    return dropout


@register("BitCast", since=26)
def _bitcast(node: Node):
    dtype = torch_dtype(node.attr("to"))

    def bitcast(xs):
        x = xs[0]
        if x.element_size() != torch.empty((), dtype=dtype).element_size():
            raise ValueError("BitCast between types of different widths")
        return [x.view(dtype)]
    return bitcast


@register("SwiGLU", since=28)
def _swiglu(node: Node):
    alpha = node.attr("alpha", 1.0)
    return lambda xs: [xs[0] * torch.sigmoid(alpha * xs[0]) * xs[1]]
