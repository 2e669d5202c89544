"""What every placer shares: the call signature, memory caps and the memory model they respect.

A placer is a function ``(graph, devices, cost, caps, *, seed) -> Placement``: `devices` are
device names in the order placements list them, `cost` a `CostModel` (placers that do not need
one accept None), `caps` device name -> bytes (a missing device has no cap).
"""

from __future__ import annotations

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
    """Bytes a node holds on its device if nothing is freed: its weights plus its outputs.

    The placers that respect caps budget with this (Baechi's "persistent + output memory"); it
    over-estimates what the executor keeps alive, so a placement within it fits.
    """
    return node.param_bytes + node.output_bytes


def static_memory(graph: OpGraph, placement: Placement) -> dict[str, int]:
    """Per-device sum of `node_memory` under `placement` (every device listed)."""
    used = {d: 0 for d in placement.devices}
    for name, node in graph.nodes.items():
        used[placement.nodes[name]] += node_memory(node)
    return used


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
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}GiB"


def make_placement(graph: OpGraph, devices: list[str], nodes: dict[str, str], placer: str,
                   **info: object) -> Placement:
    """A `Placement` for `graph` recording which placer made it (under extra["placer"])."""
    return Placement(devices=list(devices), nodes={n: nodes[n] for n in graph.nodes},
                     graph_sha256=graph.sha256, extra={"placer": {"name": placer, **info}})
