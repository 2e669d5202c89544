"""Baechi's m-SCT: shortest-communication-time scheduling with favourite children (Hanen and
Munier's SCT, memory-constrained).

Each node names at most one *favourite child*, the successor it should share a device with so
that their tensor never crosses a link. Baechi picks favourite children by an LP relaxation;
this module uses the LP's **greedy form**: parents in topological order each take, among their
successors that no other parent has claimed, the one whose tensors cost the most to transfer.
Scheduling then follows ETF, except that a device which has just run a node and is the
earliest place its (ready) favourite child can start *waits* for that child: it runs another
node first only if that node is urgent, i.e. would start no earlier on any other device.
"""

from __future__ import annotations

from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.placement import Placement
from placer.placers.base import Caps, make_placement, require_cost, require_devices
from placer.placers.m_etf import etf_schedule
from placer.placers.scheduling import ScheduleState, schedule_within_caps


def favourite_children(state: ScheduleState) -> dict[str, str]:
    """Parent -> favourite child, by the greedy rule (largest transfer time, each child once)."""
    cost, devices = state.cost, state.devices
    pairs = [(a, b) for a in devices for b in devices if a != b]

    def transfer(nbytes: int) -> float:
        # The child's tensors would cross some link; rate edges by the mean over links.
        return sum(cost.transfer_time(nbytes, a, b) for a, b in pairs) / len(pairs) if pairs else float(nbytes)

    edge_cost = {(u, v): transfer(nbytes) for v in state.graph.nodes for u, nbytes in state.preds[v]}
    claimed: set[str] = set()
    favourite: dict[str, str] = {}
    for parent in state.graph.nodes:
        free = [c for c in state.succs[parent] if c not in claimed]
        if free:
            # succs are in topological order, so max() keeps the earliest child on ties
            child = max(free, key=lambda c: edge_cost[parent, c])
            favourite[parent] = child
            claimed.add(child)
    return favourite


def m_sct(graph: OpGraph, devices: list[str], cost: CostModel | None = None,
          caps: Caps | None = None, *, seed: int = 0) -> Placement:
    """SCT list scheduling with greedy favourite children, under memory caps."""
    require_devices(devices)
    cost = require_cost(cost, "m_sct")
    favourite = favourite_children(ScheduleState(graph, devices, cost, caps))
    last_on: dict[str, str] = {}   # device -> the node it ran last

    def gate(node: str, device: str, start: float, starts: dict[str, dict[str, float]]) -> bool:
        last = last_on.get(device)
        child = favourite.get(last) if last is not None else None
        if child is None or child == node or child not in starts:
            return True  # the device is not waiting for a ready favourite child
        child_starts = starts[child]
        if device not in child_starts or child_starts[device] > min(child_starts.values()):
            return True  # the child starts earlier elsewhere: no reason to wait for it here
        return max(starts[node].values()) <= start  # only an urgent node may jump in

    def schedule(frees: bool) -> ScheduleState:
        last_on.clear()
        return etf_schedule(ScheduleState(graph, devices, cost, caps, frees), "m_sct", gate=gate,
                            on_commit=lambda node, device: last_on.__setitem__(device, node))

    state = schedule_within_caps(graph, devices, caps, cost, schedule)
    return make_placement(graph, devices, state.place, "m_sct", predicted_makespan=state.makespan,
                          favourite_children="greedy")
