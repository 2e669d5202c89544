"""Baechi's m-ETF: memory-constrained earliest-task-first list scheduling (Hwang et al. 1989).

Repeatedly, among every ready node and every device with room for it, start the pair that can
start earliest (ties: the node earlier in topological order). A node's start on a device waits
for the device to be free and for its inputs to arrive. Memory is counted as Baechi does: a
node's weights and outputs on its device, outputs freed once their last consumer is placed.
"""

from __future__ import annotations

from collections.abc import Callable

from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.placement import Placement
from placer.placers.base import Caps, make_placement, require_cost, require_devices
from placer.placers.scheduling import ScheduleState, schedule_within_caps

# gate(node, device, start, starts) -> may this pair be scheduled now? `starts` maps every ready
# node to its feasible devices' start times.
Gate = Callable[[str, str, float, dict[str, dict[str, float]]], bool]


def etf_schedule(state: ScheduleState, placer: str, gate: Gate | None = None,
                 on_commit: Callable[[str, str], None] | None = None) -> ScheduleState:
    """Run the ETF loop on `state` until every node is placed; `gate` can veto pairs (m-SCT)."""
    graph = state.graph
    missing = {n: len(state.preds[n]) for n in graph.nodes}
    ready = [n for n, k in missing.items() if k == 0]
    arrivals: dict[str, dict[str, float]] = {n: {d: 0.0 for d in state.devices} for n in ready}
    while ready:
        best: tuple[float, int, str, str] | None = None
        starts = {node: {d: max(state.free_at[d], arrivals[node][d]) for d in state.devices if state.can_run(node, d)}
                  for node in ready}
        for node in ready:
            for device, start in starts[node].items():
                if gate is not None and not gate(node, device, start, starts):
                    continue
                key = (start, state.topo_index[node], node, device)
                if best is None or key < best:
                    best = key
        if best is None:
            raise state.does_not_fit(placer, min(ready, key=state.topo_index.__getitem__))
        start, _, node, device = best
        state.commit(node, device, start)
        ready.remove(node)
        if on_commit is not None:
            on_commit(node, device)
        for succ in state.succs[node]:
            missing[succ] -= 1
            if missing[succ] == 0:
                ready.append(succ)
                arrivals[succ] = {d: state.arrival(succ, d) for d in state.devices}
    return state


def m_etf(graph: OpGraph, devices: list[str], cost: CostModel | None = None,
          caps: Caps | None = None, *, seed: int = 0) -> Placement:
    """Earliest-task-first list scheduling under memory caps."""
    require_devices(devices)
    cost = require_cost(cost, "m_etf")
    state = schedule_within_caps(graph, devices, caps, cost, lambda frees: etf_schedule(
        ScheduleState(graph, devices, cost, caps, frees), "m_etf"))
    return make_placement(graph, devices, state.place, "m_etf", predicted_makespan=state.makespan)
