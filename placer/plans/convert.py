"""Layout changes: a tensor as its producer left it, made into what a consumer reads, with the
collective DTensor would use (each change made once, however many ops read it):

- `Shard -> Replicate` all-gather, `Partial -> Replicate` all-reduce, `Partial -> Shard`
  reduce-scatter, `Shard(i) -> Shard(j)` all-to-all, over the producer's devices (`collectives`);
- onto one device: the pieces gathered there (a `Partial`'s summed there);
- from whole copies (`Replicate`, or one device): each device reads a copy, or its slice cut where a
  copy lies (on the device itself if it holds one), so only the slice is sent;
- a sharded tensor to as many other devices in the same layout: each piece sent on (a pipeline's
  hand-on between stages);
- anything else goes through whole copies on the producer's devices first.

Weights and graph inputs are held from the start in the layout their readers want, as the
simulator holds a placement's: a sharded weight's slices are weights of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from placer.graph.opgraph import OpGraph, TensorInfo
from placer.plans import collectives
from placer.plans.layout import PARTIAL, REPLICATE, Layout, Shard, piece_shape
from placer.plans.lowered import LoweredBuilder, SourceSlice


@dataclass(frozen=True)
class Pieces:
    """A tensor on `devices` in `layout`: `names[k]` is what device k holds of it."""

    devices: tuple[str, ...]
    layout: Layout
    names: tuple[str, ...]


class Converter:
    """Where every tensor of the source graph is, and the layout changes made so far."""

    def __init__(self, builder: LoweredBuilder, graph: OpGraph) -> None:
        self.b, self.graph = builder, graph
        self.held: dict[str, Pieces] = {}
        self._made: dict[tuple[str, tuple[str, ...], Layout], tuple[str, ...]] = {}

    def produced(self, tensor: str, pieces: Pieces) -> None:
        self.held[tensor] = pieces

    def pieces(self, tensor: str, devices: tuple[str, ...], layout: Layout) -> tuple[str, ...]:
        """The names device k of `devices` reads as its piece of `tensor` in `layout`."""
        if tensor not in self.held:
            return self._source(tensor, devices, layout)
        key = (tensor, devices, layout)
        if key not in self._made:
            self._made[key] = self._convert(tensor, self.held[tensor], devices, layout)
        return self._made[key]

    def _source(self, tensor: str, devices: tuple[str, ...], layout: Layout) -> tuple[str, ...]:
        info = self.graph.tensors[tensor]
        weight = tensor in self.graph.initializers
        if layout == REPLICATE:
            return (self.b.add_source(info, weight),) * len(devices)
        if not isinstance(layout, Shard):
            raise ValueError(f"no split reads a {layout} input ({tensor})")
        n = len(devices)
        return tuple(self.b.add_source(TensorInfo(f"{tensor}[{layout} {k}/{n}]@{device}",
                                                  piece_shape(info.shape, layout, k, n), info.dtype), weight,
                                       SourceSlice(tensor, layout, k, n))
                     for k, device in enumerate(devices))

    def _convert(self, tensor: str, src: Pieces, devices: tuple[str, ...], layout: Layout) -> tuple[str, ...]:
        info, b = self.graph.tensors[tensor], self.b
        if (src.devices, src.layout) == (devices, layout):
            return src.names
        if src.layout == REPLICATE:
            return self._from_copies(tensor, dict(zip(src.devices, src.names)), devices, layout)
        if len(devices) == 1:
            return (self._onto(tensor, src, devices[0]),)
        if src.devices == devices:
            if isinstance(src.layout, Shard) and layout == REPLICATE:
                return tuple(collectives.all_gather(b, devices, src.names, info, src.layout, f"{tensor}/all-gather"))
            if src.layout == PARTIAL and layout == REPLICATE:
                return tuple(collectives.all_reduce(b, devices, src.names, info, f"{tensor}/all-reduce"))
            if src.layout == PARTIAL and isinstance(layout, Shard):
                return tuple(collectives.reduce_scatter(b, devices, src.names, info, layout,
                                                        f"{tensor}/reduce-scatter"))
            if isinstance(src.layout, Shard) and isinstance(layout, Shard):
                return tuple(collectives.all_to_all(b, devices, src.names, info, src.layout, layout,
                                                    f"{tensor}/all-to-all"))
        if len(src.devices) == len(devices) and src.layout == layout:
            return src.names
        whole = self.pieces(tensor, src.devices, REPLICATE)
        return self._from_copies(tensor, dict(zip(src.devices, whole)), devices, layout)

    def _from_copies(self, tensor: str, copies: dict[str, str], devices: tuple[str, ...],
                     layout: Layout) -> tuple[str, ...]:
        """From whole copies (device -> name): each device reads its own copy or the first one,
        or, for a slice, reads the slice cut on the device holding the copy it would read."""
        first = next(iter(copies))
        holders = [d if d in copies else first for d in devices]
        if layout == REPLICATE:
            return tuple(copies[h] for h in holders)
        if not isinstance(layout, Shard):
            raise ValueError(f"no split reads a {layout} input ({tensor})")
        info, n = self.graph.tensors[tensor], len(devices)
        return tuple(collectives.cut(self.b, h, copies[h], info, layout, k, n, f"{tensor}/cut")
                     for k, h in enumerate(holders))

    def _onto(self, tensor: str, src: Pieces, root: str) -> str:
        """The whole tensor on `root`, from its pieces (sharded: gathered; partial: summed)."""
        info = self.graph.tensors[tensor]
        if src.layout == PARTIAL:
            opset = self.graph.opsets.get("", 13)
            return collectives.reduce(self.b, root, src.names, info, opset, f"{tensor}/reduce")
        return collectives.gather(self.b, root, src.names, info, src.layout, f"{tensor}/gather")
