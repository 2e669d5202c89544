"""Activations and the softmax family."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from placer.kernels.registry import Node, register


@register("Relu")
def _relu(node: Node):
    return lambda xs: [torch.relu(xs[0])]


@register("Sigmoid")
def _sigmoid(node: Node):
    return lambda xs: [torch.sigmoid(xs[0])]


@register("Tanh")
def _tanh(node: Node):
    return lambda xs: [torch.tanh(xs[0])]


@register("LeakyRelu")
def _leaky(node: Node):
    alpha = node.attr("alpha", 0.01)
    return lambda xs: [F.leaky_relu(xs[0], alpha)]


@register("PRelu", since=1)
def _prelu1(node: Node):
    def prelu(xs):
        x, slope = xs
        if slope.dim() == 1 and x.dim() > 2 and slope.numel() == x.shape[1]:
            # Before opset 7 a (C,) slope was per channel, not numpy-broadcast.
            slope = slope.reshape([-1] + [1] * (x.dim() - 2))
        return [torch.where(x >= 0, x, x * slope)]
    return prelu


@register("PRelu", since=7)
def _prelu(node: Node):
    # The slope broadcasts unidirectionally to X (any shape), which F.prelu does not accept.
    return lambda xs: [torch.where(xs[0] >= 0, xs[0], xs[0] * xs[1])]


@register("HardSigmoid")
def _hardsigmoid(node: Node):
    alpha, beta = node.attr("alpha", 0.2), node.attr("beta", 0.5)
    if math.isclose(alpha, 1 / 6) and beta == 0.5:
        return lambda xs: [F.hardsigmoid(xs[0])]
    return lambda xs: [torch.clamp(xs[0] * alpha + beta, 0, 1)]


@register("HardSwish", since=14)
def _hardswish(node: Node):
    return lambda xs: [F.hardswish(xs[0])]


@register("Elu")
def _elu(node: Node):
    alpha = node.attr("alpha", 1.0)
    return lambda xs: [F.elu(xs[0], alpha)]


@register("Selu")
def _selu(node: Node):
    alpha = node.attr("alpha", 1.67326319217681884765625)
    gamma = node.attr("gamma", 1.05070102214813232421875)
    return lambda xs: [gamma * torch.where(xs[0] > 0, xs[0], alpha * torch.expm1(xs[0]))]


@register("Celu", since=12)
def _celu(node: Node):
    alpha = node.attr("alpha", 1.0)
    return lambda xs: [F.celu(xs[0], alpha)]


@register("ThresholdedRelu", since=10)
def _thresholded(node: Node):
    alpha = node.attr("alpha", 1.0)
    return lambda xs: [torch.where(xs[0] > alpha, xs[0], torch.zeros_like(xs[0]))]


@register("Softplus")
def _softplus(node: Node):
    return lambda xs: [F.softplus(xs[0])]


@register("Softsign")
def _softsign(node: Node):
    return lambda xs: [F.softsign(xs[0])]


@register("Mish", since=18)
def _mish(node: Node):
    return lambda xs: [F.mish(xs[0])]


@register("Gelu", since=20)
def _gelu(node: Node):
    approximate = node.attr("approximate", "none")
    return lambda xs: [F.gelu(xs[0], approximate=approximate)]


@register("Shrink", since=9)
def _shrink(node: Node):
    bias, lambd = node.attr("bias", 0.0), node.attr("lambd", 0.5)

    def shrink(xs):
        x = xs[0]
        y = torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias, torch.zeros_like(x)))
        return [y.to(x.dtype)]
    return shrink


def _coerced(fn, axis: int):
    """Softmax before opset 13: flatten to 2-D at `axis`, apply along the second dim, restore."""
    def run(xs):
        x = xs[0]
        a = axis + x.dim() if axis < 0 else axis
        rows = math.prod(x.shape[:a])
        return [fn(x.reshape(rows, -1), 1).reshape(x.shape)]
    return run


class _ZeroGradient(torch.autograd.Function):
    """`y`, a piecewise-constant function of `x`: its gradient to x is zero, not missing (a
    training step's backward refuses an output that carries none)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[None, None]:
        return None, None


def _hardmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    # argmax picks the first maximum, as ONNX asks.
    return _ZeroGradient.apply(x, F.one_hot(x.argmax(dim), x.shape[dim]).movedim(-1, dim).to(x.dtype))


_SOFTMAX = {"Softmax": torch.softmax, "LogSoftmax": torch.log_softmax, "Hardmax": _hardmax}


@register("Softmax", "LogSoftmax", "Hardmax", since=1)
def _softmax1(node: Node):
    return _coerced(_SOFTMAX[node.op_type], node.attr("axis", 1))


@register("Softmax", "LogSoftmax", "Hardmax", since=13)
def _softmax13(node: Node):
    fn, axis = _SOFTMAX[node.op_type], node.attr("axis", -1)
    return lambda xs: [fn(xs[0], axis)]


@register("Swish", since=24)
def _swish(node: Node):
    alpha = node.attr("alpha", 1.0)
    if alpha == 1.0:
        return lambda xs: [F.silu(xs[0])]
    return lambda xs: [xs[0] * torch.sigmoid(alpha * xs[0])]
