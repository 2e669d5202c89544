"""Kernels of the steps a lowered plan's layout changes are made of (domain `placer.plan`, which
`placer.plans.lowered` writes; `placer.plans.collectives` says what each step does in a ring).

Each step runs on its own device on what that device holds; what crosses between devices (a
ring step's output read by the next device) the executor hands over as any tensor, so a ring
collective is these steps and the executor's hand-overs, as NCCL's is copies and kernels.
Attributes say which slice a step works on: `axis`, `start`, `size`; `flatten` works on the
tensor flattened (an all-reduce's chunks are n-ths of all its elements).
"""

from __future__ import annotations

import torch

from placer.kernels.registry import Node, Tensors, register

DOMAIN = "placer.plan"


def _slice(x: torch.Tensor, node: Node) -> torch.Tensor:
    if node.attr("flatten", 0):
        x = x.reshape(-1)
    return x.narrow(node.attr("axis"), node.attr("start"), node.attr("size"))


@register("Slice", domain=DOMAIN)
def _cut(node: Node):
    """A device's slice of a whole tensor it holds (a view)."""
    return lambda xs: [_slice(xs[0], node)]


@register("ReduceScatter", domain=DOMAIN)
def _reduce_scatter_step(node: Node):
    """One ring step: this device's part of the chunk, plus the running sum received (if any)."""
    def run(xs: Tensors) -> list[torch.Tensor]:
        own = _slice(xs[-1], node)
        return [own if len(xs) == 1 else xs[0] + own]
    return run


@register("AllGather", domain=DOMAIN)
def _hand_on(node: Node):
    """One ring step: the piece is passed on as it is (the hand-over is the executor's)."""
    return lambda xs: [xs[0]]


@register("Join", "Gather", domain=DOMAIN)
def _join(node: Node):
    """The pieces a collective delivered, as one tensor: along `axis`, or flat and reshaped."""
    axis, flat, shape = node.attr("axis", 0), node.attr("flatten", 0), node.attr("shape")

    def run(xs: Tensors) -> list[torch.Tensor]:
        if flat:
            return [torch.cat([x.reshape(-1) for x in xs]).reshape(shape)]
        return [torch.cat(list(xs), axis)]
    return run


@register("AllToAll", domain=DOMAIN)
def _all_to_all(node: Node):
    """This device's piece cut along `axis` into one slice for each device."""
    axis, sizes = node.attr("axis"), node.attr("sizes")
    return lambda xs: list(torch.split(xs[0], sizes, axis))
