"""Padding arithmetic shared by convolutions and pools (ONNX `pads` and `auto_pad`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F


def fixed_pads(pads: Sequence[int] | None, n: int) -> tuple[list[int], list[int]]:
    """ONNX `pads` [x1_begin, x2_begin, ..., x1_end, ...] -> (begins, ends)."""
    pads = list(pads) if pads else [0] * (2 * n)
    return pads[:n], pads[n:]


def same_pads(auto_pad: str, sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
              dilations: Sequence[int]) -> tuple[list[int], list[int]]:
    """Begins and ends of SAME_UPPER / SAME_LOWER padding for input `sizes` (VALID: zeros)."""
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        if auto_pad == "VALID":
            begins.append(0)
            ends.append(0)
            continue
        out = math.ceil(size / s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        begin, end = split_same(auto_pad, total)
        begins.append(begin)
        ends.append(end)
    return begins, ends


def split_same(auto_pad: str, total: int) -> tuple[int, int]:
    """Split `total` padding into (begin, end): SAME_UPPER puts the odd one at the end, SAME_LOWER at the begin."""
    half = total // 2
    return (half, total - half) if auto_pad == "SAME_UPPER" else (total - half, half)


def torch_pad(begins: Sequence[int], ends: Sequence[int]) -> list[int]:
    """(begins, ends) over the spatial dims -> F.pad's list, last dim first."""
    out: list[int] = []
    for b, e in zip(reversed(begins), reversed(ends)):
        out += [b, e]
    return out


def pad_input(x: torch.Tensor, begins: Sequence[int], ends: Sequence[int],
              value: float = 0.0) -> torch.Tensor:
    """Pad the trailing spatial dims of x explicitly (for asymmetric padding)."""
    if not any(begins) and not any(ends):
        return x
    return F.pad(x, torch_pad(begins, ends), value=value)
