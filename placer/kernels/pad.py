"""Pad: constant, reflect, edge and wrap modes over any axes (pads and axes as attrs or inputs)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from placer.kernels.registry import Node, register


def _index(n: int, begin: int, end: int, mode: str, device: torch.device) -> torch.Tensor:
    """Source positions of a padded (or, with negative amounts, cropped) axis of length n."""
    i = torch.arange(-begin, n + end, device=device)
    if mode == "edge":
        return i.clamp(0, n - 1)
    if mode == "wrap":
        return i.remainder(n)
    period = 2 * (n - 1)    # reflect: mirror without repeating the edge
    if period == 0:
        return torch.zeros_like(i)
    j = i.remainder(period)
    return torch.where(j > n - 1, period - j, j)


def _pad(x: torch.Tensor, pads: list[int], mode: str, value, axes: list[int] | None) -> torch.Tensor:
    rank = x.dim()
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    k = len(axes)
    begins = dict(zip(axes, pads[:k]))
    ends = dict(zip(axes, pads[k:]))
    if mode == "constant":
        torch_pads: list[int] = []
        for a in range(rank - 1, -1, -1):
            torch_pads += [begins.get(a, 0), ends.get(a, 0)]
        # F.pad lists pairs from the last dim backwards; trailing zero pairs can be dropped.
        while torch_pads and torch_pads[-1] == 0 and torch_pads[-2] == 0:
            torch_pads = torch_pads[:-2]
        if not torch_pads:
            return x
        return F.pad(x, torch_pads, value=value if value is not None else 0)
    for a in axes:
        if begins[a] or ends[a]:
            x = torch.index_select(x, a, _index(x.shape[a], begins[a], ends[a], mode, x.device))
    return x


@register("Pad", since=2)
def _pad2(node: Node):
    pads, mode, value = list(node.attr("pads")), node.attr("mode", "constant"), node.attr("value", 0.0)
    return lambda xs: [_pad(xs[0], pads, mode, value, None)]


@register("Pad", since=11, host_inputs=(1, 2, 3))
def _pad11(node: Node):
    mode = node.attr("mode", "constant")

    def pad(xs):
        x, pads = xs[0], [int(v) for v in xs[1].tolist()]
        value = xs[2].reshape(-1).tolist()[0] if len(xs) > 2 and xs[2] is not None else 0
        axes = [int(v) for v in xs[3].tolist()] if len(xs) > 3 and xs[3] is not None else None
        if x.dtype == torch.bool:
            value = bool(value)
        return [_pad(x, pads, mode, value, axes)]
    return pad
