"""Normalisations: BatchNormalization (inference), Instance/Layer/Group norms, LRN, LpNormalization."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from placer.kernels.registry import Node, register


@register("BatchNormalization", since=1)
def _batchnorm(node: Node):
    eps = node.attr("epsilon", 1e-5)
    if node.opset >= 14 and node.attr("training_mode", 0):
        return _batchnorm_training(node, eps, node.attr("momentum", 0.9))
    if (node.opset < 14 and node.n_outputs > 1 and any(node.outputs_used[1:])) or \
            (node.opset < 7 and node.attr("is_test", 0) == 0):
        raise NotImplementedError("training-mode BatchNormalization before opset 14")

    def bn(xs):
        x, scale, bias, mean, var = xs[:5]
        if x.dim() == 1:
            raise ValueError("BatchNormalization of a 1-D input")
        if mean.requires_grad or var.requires_grad:
            # torch's batch_norm has no gradient for the running statistics: the formula itself
            shape = [1, -1] + [1] * (x.dim() - 2)
            y = (x - mean.reshape(shape)) * torch.rsqrt(var.reshape(shape) + eps)
            return [y * scale.reshape(shape) + bias.reshape(shape)]
        return [F.batch_norm(x, mean, var, scale, bias, False, 0.0, eps)]
    return bn


def _batchnorm_training(node: Node, eps: float, momentum: float):
    """Opset 14+ training mode: normalise with the batch statistics and return the updated
    running mean and (population) variance."""
    def bn(xs):
        x, scale, bias, mean, var = xs[:5]
        dims = [d for d in range(x.dim()) if d != 1]
        batch_var, batch_mean = torch.var_mean(x, dims, correction=0)
        # torch computes the batch statistics again, with their gradient (passed in, they have none)
        y = F.batch_norm(x, None, None, scale, bias, True, 0.0, eps)
        return [y, mean * momentum + batch_mean * (1 - momentum),
                var * momentum + batch_var * (1 - momentum)]
    return bn


@register("InstanceNormalization", since=1)
def _instancenorm(node: Node):
    eps = node.attr("epsilon", 1e-5)
    return lambda xs: [F.instance_norm(xs[0], weight=xs[1], bias=xs[2], eps=eps)]


@register("LayerNormalization", since=17)
def _layernorm(node: Node):
    axis, eps = node.attr("axis", -1), node.attr("epsilon", 1e-5)
    extra = node.n_outputs > 1 and any(node.outputs_used[1:])
    stash = node.attr("stash_type", 1)

    def ln(xs):
        x, scale = xs[0], xs[1]
        bias = xs[2] if len(xs) > 2 else None
        a = axis + x.dim() if axis < 0 else axis
        shape = tuple(x.shape[a:])
        if not extra:
            w = scale if tuple(scale.shape) == shape else scale.expand(shape)
            b = bias if bias is None or tuple(bias.shape) == shape else bias.expand(shape)
            return [F.layer_norm(x, shape, w, b, eps)]
        dims = tuple(range(a, x.dim()))
        xf = x.float() if stash == 1 and x.dtype in (torch.float16, torch.bfloat16) else x
        mean = xf.mean(dims, keepdim=True)
        var = (xf - mean).pow(2).mean(dims, keepdim=True)
        inv = torch.rsqrt(var + eps)
        y = ((xf - mean) * inv).to(x.dtype) * scale
        if bias is not None:
            y = y + bias
        return [y, mean, inv]
    return ln


@register("GroupNormalization", since=18)
def _groupnorm(node: Node):
    groups, eps = node.attr("num_groups"), node.attr("epsilon", 1e-5)
    per_group = node.opset < 21   # opset 18 had one scale/bias per group, 21 one per channel

    def gn(xs):
        x, scale, bias = xs
        if per_group:
            rep = x.shape[1] // groups
            scale, bias = scale.repeat_interleave(rep), bias.repeat_interleave(rep)
        return [F.group_norm(x, groups, scale, bias, eps)]
    return gn


@register("LRN", since=1)
def _lrn(node: Node):
    size = node.attr("size")
    alpha, beta, bias = node.attr("alpha", 1e-4), node.attr("beta", 0.75), node.attr("bias", 1.0)
    # ONNX and torch both divide alpha by size; torch pads the channel window like ONNX does.
    return lambda xs: [F.local_response_norm(xs[0], size, alpha, beta, bias)]


@register("LpNormalization", since=1)
def _lpnorm(node: Node):
    axis, p = node.attr("axis", -1), node.attr("p", 2)
    def lpnorm(xs):
        norm = torch.linalg.vector_norm(xs[0], p, dim=axis, keepdim=True)
        # A zero vector stays zero instead of becoming 0/0; divided by 1, its gradient is not NaN either.
        zero = norm == 0
        return [torch.where(zero, torch.zeros_like(xs[0]), xs[0] / torch.where(zero, 1, norm))]
    return lpnorm


@register("MeanVarianceNormalization", since=9)
def _mvn(node: Node):
    axes = tuple(node.attr("axes", [0, 2, 3]))

    def mvn(xs):
        x = xs[0]
        mean = x.mean(axes, keepdim=True)
        var = (x * x).mean(axes, keepdim=True) - mean * mean
        return [(x - mean) / (var.sqrt() + 1e-9)]
    return mvn


@register("RMSNormalization", since=23)
def _rmsnorm(node: Node):
    axis, eps = node.attr("axis", -1), node.attr("epsilon", 1e-5)

    def rms(xs):
        x, scale = xs
        a = axis + x.dim() if axis < 0 else axis
        dims = tuple(range(a, x.dim()))
        # stash_type 1: statistics in float32 even for half inputs.
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        y = xf * torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + eps)
        return [(y * scale).to(x.dtype)]
    return rms
