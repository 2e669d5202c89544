"""What every placer shares: the call signature, memory caps and the memory model they respect.

A placer is a function ``(graph, devices, cost, caps, *, seed) -> Placement``: `devices` are
device names in the order placements list them, `cost` a `CostModel` (placers that do not need
one accept None), `caps` device name -> bytes (a missing device has no cap).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph, OpNode
from placer.measure.costmodel import CostModel
from placer.measure.devices import Device
from placer.placement import Placement

Caps = dict[str, int]


class Placer(Protocol):
    def __call__(self, graph: OpGraph, devices: list[str], cost: CostModel | None = None,
                 caps: Caps | None = None, *, seed: int = 0) -> Placement: ...


def caps_from_devices(devices: Sequence[Device]) -> Caps:
    """Device name -> memory cap, for the devices that have one (`cuda:0[mem=4GiB]`)."""
    return {d.name: d.mem_cap for d in devices if d.mem_cap is not None}


def node_memory(node: OpNode) -> int:
    """Bytes a node holds on its device if nothing is freed: its weights plus its outputs."""
    return node.param_bytes + node.output_bytes


class MemoryBook:
    """The memory budget the cap-respecting placers keep, device by device.

    A node placed on a device costs its weights and outputs (Baechi's persistent + output
    memory), plus a copy of each input that is not there yet: a graph input, or a tensor made
    on another device. Nothing is freed unless a placer calls `release`, so the book
    over-estimates the executor's tensor-lifetime peak and a placement within it fits.
    """

    def __init__(self, graph: OpGraph, devices: list[str], caps: Caps | None) -> None:
        self.graph = graph
        self.caps = {d: float((caps or {}).get(d, math.inf)) for d in devices}
        self.used = {d: 0 for d in devices}
        self.peak = {d: 0 for d in devices}
        self._present: dict[str, set[str]] = {d: set() for d in devices}  # tensors held on d

    def need(self, node: str, device: str, place: dict[str, str]) -> int:
        """Bytes `node` would add on `device`, given where its producers went (`place`)."""
        op = self.graph.nodes[node]
        have = self._present[device]
        copies = sum(self.graph.tensors[t].nbytes for t in self._arriving(op, device, place) if t not in have)
        return node_memory(op) + copies

    def fits(self, node: str, device: str, place: dict[str, str]) -> bool:
        if self.caps[device] == math.inf:
            return True   # no cap: skip the accounting, the list schedulers ask this very often
        return self.used[device] + self.need(node, device, place) <= self.caps[device]

    def add(self, node: str, device: str, place: dict[str, str]) -> None:
        """Charge `node` to `device` (call before recording it in `place`)."""
        op = self.graph.nodes[node]
        self.used[device] += self.need(node, device, place)
        self._present[device].update(self._arriving(op, device, place))
        self._present[device].update(t for t in op.outputs if t)
        self.peak[device] = max(self.peak[device], self.used[device])

    def release(self, device: str, nbytes: int) -> None:
        self.used[device] -= nbytes

    def _arriving(self, op: OpNode, device: str, place: dict[str, str]) -> list[str]:
        producer = self.graph.producer
        feeds = {t.name for t in self.graph.inputs}
        return [t for t in dict.fromkeys(op.inputs) if t and t in self.graph.tensors and
                (t in feeds or (t in producer and place.get(producer[t]) not in (None, device)))]


def static_memory(graph: OpGraph, placement: Placement) -> dict[str, int]:
    """Per-device memory of `placement` as the `MemoryBook` counts it (every device listed)."""
    book = MemoryBook(graph, placement.devices, None)
    place: dict[str, str] = {}
    for name in graph.nodes:
        book.add(name, placement.nodes[name], place)
        place[name] = placement.nodes[name]
    return book.used


def require_cost(cost: CostModel | None, placer: str) -> CostModel:
    """The cost model, or a PlacerError saying the placer needs one."""
    if cost is None:
        raise PlacerError(f"the {placer} placer needs a cost model; pass a profiled or analytic one")
    return cost


def require_devices(devices: list[str]) -> None:
    if not devices:
        raise PlacerError("no devices to place on; give at least one, e.g. --devices cpu:0,cpu:1")


def does_not_fit(placer: str, graph: OpGraph, caps: Caps, node: str | None = None) -> PlacerError:
    """The error a cap-respecting placer raises when the graph cannot fit under the caps."""
    total = sum(node_memory(n) for n in graph.nodes.values())
    where = f" (stuck at node {node!r})" if node else ""
    capped = ", ".join(f"{d}={human_bytes(c)}" for d, c in caps.items())
    return PlacerError(f"{placer}: the graph needs about {human_bytes(total)} but the memory caps ({capped}) "
                       f"leave too little{where}; raise the mem= caps or add devices")


def human_bytes(n: float) -> str:
    """1536 -> '1.5KiB'."""
    if abs(n) < 1024:
        return f"{n:.0f}B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "GiB":
            break
    return f"{n:.1f}{unit}"


def supports(node: OpNode, device: str) -> bool:
    """Whether the node's op can run on the device's kind ('cuda:1' -> 'cuda')."""
    return device.split(":", 1)[0] in node.device_kinds


def make_placement(graph: OpGraph, devices: list[str], nodes: dict[str, str], placer: str,
                   **info: object) -> Placement:
    """A `Placement` for `graph` recording which placer made it (under extra["placer"]).

    A node put on a device kind its op cannot run on moves to the first device that can run it,
    so even the cost-blind placers give a runnable placement.
    """
    placed = {}
    moved = 0
    for name, node in graph.nodes.items():
        device = nodes[name]
        if not supports(node, device):
            device = next((d for d in devices if supports(node, d)), device)
            moved += device != nodes[name]
        placed[name] = device
    if moved:
        info = {**info, "moved_to_supporting_device": moved}
    return Placement(devices=list(devices), nodes=placed, graph_sha256=graph.sha256,
                     extra={"placer": {"name": placer, **info}})
