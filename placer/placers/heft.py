"""HEFT (Topcuoglu et al. 2002): critical-path list scheduling on heterogeneous devices.

Nodes are taken in decreasing *upward rank* (mean time of the node plus the longest path of
mean times and mean transfers to the graph's end: the critical path through it), and each goes
to the device where it would finish earliest, allowed to fill an idle gap of that device's
timeline (insertion policy). Caps are respected with the static budget (weights + outputs).
"""

from __future__ import annotations

import math

import numpy as np

from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.placement import Placement
from placer.placers.base import Caps, make_placement, require_cost, require_devices
from placer.placers.scheduling import ScheduleState, schedule_within_caps


def upward_ranks(state: ScheduleState) -> dict[str, float]:
    """rank(n) = mean time of n + max over successors s of (mean transfer n->s + rank(s))."""
    devices, cost = state.devices, state.cost
    links = [(a, b) for a in devices for b in devices if a != b]
    mean_time = {}
    for n, times in state.times.items():
        finite = [t for t in times.values() if math.isfinite(t)]
        mean_time[n] = float(np.mean(finite)) if finite else 0.0
    rank: dict[str, float] = {}
    mean_transfer: dict[int, float] = {}   # by size: repeated layers send the same sizes again and again
    for n in reversed(list(state.graph.nodes)):
        tail = 0.0
        for s in state.succs[n]:
            nbytes = int(state.graph.dag.edges[n, s].get("bytes", 0))
            comm = mean_transfer.get(nbytes)
            if comm is None:
                comm = mean_transfer[nbytes] = ((sum(cost.transfer_time(nbytes, a, b) for a, b in links) / len(links))
                                                if links else 0.0)
            tail = max(tail, comm + rank[s])
        rank[n] = mean_time[n] + tail
    return rank


def _schedule(state: ScheduleState, order: list[str]) -> ScheduleState:
    """Each node in `order` to the device where it finishes earliest (gaps may be filled)."""
    for node in order:
        best: tuple[float, int, str, float] | None = None
        for i, device in enumerate(state.devices):
            if not state.can_run(node, device):
                continue
            start = state.insertion_start(node, device, state.arrival(node, device))
            key = (start + state.times[node][device], i, device, start)
            if best is None or key < best:
                best = key
        if best is None:
            raise state.does_not_fit("heft", node)
        _, _, device, start = best
        state.commit(node, device, start)
    return state


def heft(graph: OpGraph, devices: list[str], cost: CostModel | None = None,
         caps: Caps | None = None, *, seed: int = 0) -> Placement:
    """Each node, by decreasing upward rank, on the device giving it the earliest finish time."""
    require_devices(devices)
    cost = require_cost(cost, "heft")
    rank = upward_ranks(ScheduleState(graph, devices, cost, None))
    topo_index = {n: i for i, n in enumerate(graph.nodes)}
    order = sorted(graph.nodes, key=lambda n: (-rank[n], topo_index[n]))
    state = schedule_within_caps(graph, devices, caps, cost, lambda frees: _schedule(
        ScheduleState(graph, devices, cost, caps, frees), order))
    return make_placement(graph, devices, state.place, "heft", predicted_makespan=state.makespan)
