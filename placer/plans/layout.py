"""How a tensor lies on an op's devices, named as torch DTensor names it (so a PyTorch user reads a
plan without a glossary):

- `Shard(dim)`: device k of n holds the k-th slice along axis `dim` (balanced, as
  `numpy.array_split` cuts: the first `length % n` slices are one longer); `Shard(dim, parts=3:1)`
  cuts it unevenly, slice k in proportion to `parts[k]` (data parallelism over devices of unequal
  speed), which DTensor has no name for;
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
    parts: tuple[int, ...] | None = None   # uneven: slice k's share of the axis; None: balanced

    def __str__(self) -> str:
        return f"Shard({self.dim})" if self.parts is None else f"Shard({self.dim}, parts={':'.join(map(str, self.parts))})"

    @property
    def even(self) -> Shard:
        """The same axis cut evenly."""
        return Shard(self.dim)


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
_FORM = re.compile(r"\s*(?:Shard\(\s*(?:dim\s*=\s*)?(\d+)\s*(?:,\s*parts\s*=\s*(\d+(?:\s*:\s*\d+)+)\s*)?\)"
                   r"|(Replicate)\(\s*\)|(Partial)\(\s*\))\s*")


def parse_layout(text: str, where: str = "a layout") -> Layout:
    """'Shard(0)' (or DTensor's repr 'Shard(dim=0)'; uneven 'Shard(0, parts=3:1)'), 'Replicate()',
    'Partial()'; else one line."""
    m = _FORM.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise PlacerError(f"{where}: cannot read {text!r} as a layout; write Shard(<axis>), Replicate() or Partial()")
    if m.group(1) is not None:
        parts = tuple(int(x) for x in m.group(2).split(":")) if m.group(2) else None
        if parts is not None and not all(parts):
            raise PlacerError(f"{where}: {text!r} gives a device no part; give each device a part of 1 or more")
        return Shard(int(m.group(1)), parts)
    return REPLICATE if m.group(3) else PARTIAL


def shard_sizes(length: int, n: int, parts: tuple[int, ...] | None = None) -> list[int]:
    """The lengths of the n slices `Shard` cuts an axis of `length` into: balanced, or in proportion
    to `parts` (rounded by largest remainder, ties to the first), exact where they sum to `length`."""
    if parts is None:
        base, extra = divmod(length, n)
        return [base + (1 if k < extra else 0) for k in range(n)]
    if len(parts) != n:
        raise PlacerError(f"Shard(parts={':'.join(map(str, parts))}) gives {len(parts)} parts to {n} devices; "
                          "give one part per device")
    total = sum(parts)
    sizes = [length * p // total for p in parts]
    order = sorted(range(n), key=lambda k: (-(length * parts[k] % total), k))
    for k in order[:length - sum(sizes)]:
        sizes[k] += 1
    return sizes


def piece_shape(shape: tuple[int, ...], layout: Layout, k: int, n: int) -> tuple[int, ...]:
    """The shape of device k's piece (of n) of a tensor of `shape` laid out as `layout`."""
    if not isinstance(layout, Shard):
        return tuple(shape)
    if not 0 <= layout.dim < len(shape):
        raise PlacerError(f"{layout} names no axis of a tensor of shape {list(shape)}")
    return tuple(shard_sizes(shape[layout.dim], n, layout.parts)[k] if a == layout.dim else d
                 for a, d in enumerate(shape))


def piece_bounds(length: int, layout: Shard, k: int, n: int) -> tuple[int, int]:
    """Where device k's slice (of n) of an axis of `length` starts, and its length."""
    sizes = shard_sizes(length, n, layout.parts)
    return sum(sizes[:k]), sizes[k]
