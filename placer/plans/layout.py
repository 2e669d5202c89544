"""How a tensor lies on an op's devices, named as torch DTensor names it (so a PyTorch user reads a
plan without a glossary):

- `Shard(dim)`: device k of n holds the k-th slice along axis `dim` (balanced, as
  `numpy.array_split` cuts: the first `length % n` slices are one longer);
- `Replicate()`: every device holds all of it;
- `Partial()`: every device holds a full-sized part of a sum (what a matmul split along its reduced
  axis leaves).

On one device every layout is the whole tensor, so a whole op's layouts are all `Replicate()`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from placer.errors import PlacerError


@dataclass(frozen=True)
class Shard:
    dim: int

    def __str__(self) -> str:
        return f"Shard({self.dim})"


@dataclass(frozen=True)
class Replicate:
    def __str__(self) -> str:
        return "Replicate()"


@dataclass(frozen=True)
class Partial:
    def __str__(self) -> str:
        return "Partial()"


Layout = Shard | Replicate | Partial
REPLICATE = Replicate()
PARTIAL = Partial()
_FORM = re.compile(r"\s*(?:Shard\(\s*(?:dim\s*=\s*)?(\d+)\s*\)|(Replicate)\(\s*\)|(Partial)\(\s*\))\s*")


def parse_layout(text: str, where: str = "a layout") -> Layout:
    """'Shard(0)' (or DTensor's repr 'Shard(dim=0)'), 'Replicate()', 'Partial()'; else one line."""
    m = _FORM.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise PlacerError(f"{where}: cannot read {text!r} as a layout; write Shard(<axis>), Replicate() or Partial()")
    if m.group(1) is not None:
        return Shard(int(m.group(1)))
    return REPLICATE if m.group(2) else PARTIAL


def shard_sizes(length: int, n: int) -> list[int]:
    """The lengths of the n slices `Shard` cuts an axis of `length` into."""
    base, extra = divmod(length, n)
    return [base + (1 if k < extra else 0) for k in range(n)]


def piece_shape(shape: tuple[int, ...], layout: Layout, k: int, n: int) -> tuple[int, ...]:
    """The shape of device k's piece (of n) of a tensor of `shape` laid out as `layout`."""
    if not isinstance(layout, Shard):
        return tuple(shape)
    if not 0 <= layout.dim < len(shape):
        raise PlacerError(f"{layout} names no axis of a tensor of shape {list(shape)}")
    return tuple(shard_sizes(shape[layout.dim], n)[k] if a == layout.dim else d for a, d in enumerate(shape))
