"""Random generators: RandomNormal/Uniform(+Like), Bernoulli, Multinomial.

Seeded nodes draw from their own torch.Generator (seeded once at bind time), so a model run
twice in one process gives a different but reproducible sequence; unseeded nodes use torch's
global generator. Outputs cannot equal another runtime's numbers, only their distribution.
"""

from __future__ import annotations

import torch

from placer.kernels.dtypes import torch_dtype
from placer.kernels.registry import Node, register


def _generator(node: Node) -> torch.Generator | None:
    seed = node.attr("seed")
    if seed is None:
        return None
    g = torch.Generator()
    g.manual_seed(int(seed * 1000003) & 0x7FFFFFFF)   # float seed -> stable integer
    return g


@register("RandomNormal", "RandomUniform", since=1)
def _random(node: Node):
    shape, dtype, gen = list(node.attr("shape")), torch_dtype(node.attr("dtype", 1)), _generator(node)
    normal = node.op_type == "RandomNormal"
    a = node.attr("mean", 0.0) if normal else node.attr("low", 0.0)
    b = node.attr("scale", 1.0) if normal else node.attr("high", 1.0)

    def draw(xs):
        u = torch.randn(shape, generator=gen, dtype=torch.float32) if normal else \
            torch.rand(shape, generator=gen, dtype=torch.float32)
        return [(u * b + a if normal else u * (b - a) + a).to(dtype)]
    return draw


@register("RandomNormalLike", "RandomUniformLike", since=1)
def _random_like(node: Node):
    dtype_attr, gen = node.attr("dtype"), _generator(node)
    normal = node.op_type == "RandomNormalLike"
    a = node.attr("mean", 0.0) if normal else node.attr("low", 0.0)
    b = node.attr("scale", 1.0) if normal else node.attr("high", 1.0)

    def draw(xs):
        x = xs[0]
        dtype = torch_dtype(dtype_attr) if dtype_attr is not None else x.dtype
        u = torch.randn(x.shape, generator=gen) if normal else torch.rand(x.shape, generator=gen)
        u = u * b + a if normal else u * (b - a) + a
        return [u.to(dtype=dtype, device=x.device)]
    return draw


@register("Bernoulli", since=15)
def _bernoulli(node: Node):
    dtype_attr, gen = node.attr("dtype"), _generator(node)

    def draw(xs):
        p = xs[0]
        dtype = torch_dtype(dtype_attr) if dtype_attr is not None else p.dtype
        return [torch.bernoulli(p.float().cpu(), generator=gen).to(dtype=dtype, device=p.device)]
    return draw


@register("Multinomial", since=7)
def _multinomial(node: Node):
    n, gen = node.attr("sample_size", 1), _generator(node)
    dtype = torch_dtype(node.attr("dtype", 6))

    def draw(xs):
        logits = xs[0]
        probs = torch.softmax(logits.float().cpu(), -1)
        out = torch.multinomial(probs, n, replacement=True, generator=gen)
        return [out.to(dtype=dtype, device=logits.device)]
    return draw
