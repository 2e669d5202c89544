"""Placers that walk the nodes in topological order and fill devices one after another.

- `m_topo` (Baechi, SoCC 2020): each device takes nodes until it holds its even share of the
  graph's weights and outputs (total / devices + the largest node) or reaches its cap. Unlike
  Baechi, the share is recomputed over the devices left, so memory a capped device could not
  take spreads over the rest instead of failing.
- `memory_greedy`: each device takes nodes until its memory cap is reached, as
  ``device_map="auto"``-style tools do; with no caps everything lands on the first device.
"""

from __future__ import annotations

from collections.abc import Callable

from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.placement import Placement
from placer.placers.base import (Caps, MemoryBook, does_not_fit, make_placement, node_memory, require_devices,
                                 within_caps)


def _fill(graph: OpGraph, devices: list[str], budget: Callable[[str, int, int], float], placer: str,
          caps: Caps, cost: CostModel | None, frees: bool = True) -> dict[str, str]:
    """Topological fill: the current device takes nodes while its share (the sum of the nodes'
    weights and outputs) stays within `budget(device, share not yet placed, devices left)` and
    its memory, as the `MemoryBook` tracks it (a training step's on the training objective), within
    its cap; then the next device."""
    nodes: dict[str, str] = {}
    book = MemoryBook(graph, devices, caps, frees, cost)
    order = list(graph.nodes)
    left = sum(node_memory(n) for n in graph.nodes.values())
    i = 0
    for k, device in enumerate(devices):
        share, limit = 0, budget(device, left, len(devices) - k)
        while i < len(order) and book.fits(order[i], device) and \
                share + node_memory(graph.nodes[order[i]]) <= limit:
            share += node_memory(graph.nodes[order[i]])
            book.add(order[i], device)
            nodes[order[i]] = device
            i += 1
        left -= share
    if i < len(order):
        raise does_not_fit(placer, graph, caps, order[i], cost=cost)
    return nodes


def m_topo(graph: OpGraph, devices: list[str], cost: CostModel | None = None,
           caps: Caps | None = None, *, seed: int = 0) -> Placement:
    """Baechi's m-TOPO: topological order, an even memory share per device, caps respected."""
    require_devices(devices)
    caps = caps or {}
    largest = max((node_memory(n) for n in graph.nodes.values()), default=0)

    def budget(device: str, left: int, devices_left: int) -> float:
        # The last device takes whatever is left (its cap still applies).
        return left / devices_left + largest if devices_left > 1 else float("inf")

    nodes = within_caps(graph, devices, caps, cost, lambda frees: _fill(graph, devices, budget, "m_topo", caps,
                                                                         cost, frees))
    return make_placement(graph, devices, nodes, "m_topo")


def memory_greedy(graph: OpGraph, devices: list[str], cost: CostModel | None = None,
                  caps: Caps | None = None, *, seed: int = 0) -> Placement:
    """Fill devices in the given order up to their caps, nodes in topological order."""
    require_devices(devices)
    caps = caps or {}
    nodes = within_caps(graph, devices, caps, cost, lambda frees: _fill(
        graph, devices, lambda d, left, k: float("inf"), "memory_greedy", caps, cost, frees))
    return make_placement(graph, devices, nodes, "memory_greedy")
