"""The placers a user would try first: one device, random, round-robin over groups."""

from __future__ import annotations

import logging

import numpy as np

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.placement import Placement
from placer.placers.base import Caps, make_placement, require_devices

log = logging.getLogger(__name__)


def single_device(graph: OpGraph, devices: list[str], cost: CostModel | None = None,
                  caps: Caps | None = None, *, seed: int = 0, device: str | None = None) -> Placement:
    """Every node on `device` (default: the first device); the device list is kept whole."""
    require_devices(devices)
    device = device or devices[0]
    if device not in devices:
        raise PlacerError(f"single-device placement on {device!r}, which is not among {devices}")
    return make_placement(graph, devices, {n: device for n in graph.nodes}, "single", device=device)


def random_placement(graph: OpGraph, devices: list[str], cost: CostModel | None = None,
                     caps: Caps | None = None, *, seed: int = 0) -> Placement:
    """Each node on a device drawn uniformly at random (reproducible from `seed`)."""
    require_devices(devices)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(devices), size=len(graph.nodes))
    return make_placement(graph, devices, {n: devices[int(i)] for n, i in zip(graph.nodes, picks)},
                          "random", seed=seed)


def node_groups(graph: OpGraph, n_devices: int = 2) -> list[list[str]]:
    """The learner's default grouping (co-location, then METIS into ~20 groups per device), in
    topological order of each group's first node."""
    from placer.graph.grouping import group_graph

    grouping = group_graph(graph, n_devices=n_devices)
    position = {n: i for i, n in enumerate(graph.nodes)}
    return sorted((list(g) for g in grouping.groups), key=lambda g: min(position[n] for n in g))


def round_robin(graph: OpGraph, devices: list[str], cost: CostModel | None = None,
                caps: Caps | None = None, *, seed: int = 0) -> Placement:
    """Group i on device i mod D, groups in topological order."""
    require_devices(devices)
    nodes: dict[str, str] = {}
    groups = node_groups(graph, len(devices))
    for i, group in enumerate(groups):
        for name in group:
            nodes[name] = devices[i % len(devices)]
    return make_placement(graph, devices, nodes, "round_robin", groups=len(groups))
