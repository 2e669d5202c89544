"""Matrix products: Gemm, MatMul, Einsum."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from placer.kernels.registry import Node, register


@register("Gemm", since=1)   # before 7 only `broadcast` differed, which torch does anyway
def _gemm(node: Node):
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    ta, tb = node.attr("transA", 0), node.attr("transB", 0)

    def gemm(xs):
        a, b = xs[0], xs[1]
        c = xs[2] if len(xs) > 2 else None
        if ta:
            a = a.t()
        if alpha == 1.0 and beta == 1.0 and tb and (c is None or c.dim() == 1) \
                and a.dtype.is_floating_point:
            return [F.linear(a, b, c)]   # the common fully connected layer: one fused call
        if tb:
            b = b.t()
        if c is None or beta == 0.0:
            y = torch.mm(a, b)
            return [y * alpha if alpha != 1.0 else y]
        if a.dtype.is_floating_point:
            return [torch.addmm(c.to(a.dtype), a, b, beta=beta, alpha=alpha)]
        return [alpha * torch.mm(a, b) + beta * c]
    return gemm


@register("MatMul", since=1)
def _matmul(node: Node):
    return lambda xs: [torch.matmul(xs[0], xs[1])]


@register("Einsum", since=12)
def _einsum(node: Node):
    equation = node.attr("equation").replace(" ", "")
    return lambda xs: [torch.einsum(equation, *xs)]


@register("Det", since=11)
def _det(node: Node):
    return lambda xs: [torch.linalg.det(xs[0])]
