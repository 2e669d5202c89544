"""The bookkeeping list schedulers share: where each node went, when it finishes, what each
device holds.

A list scheduler places one node at a time; a node's data is on device d once every producer
has finished and, if it ran elsewhere, its tensors have crossed to d (transfer times from the
cost model, links without contention, as Baechi's placers assume).
"""

from __future__ import annotations

import bisect
import math
from operator import itemgetter

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel, op_times
from collections.abc import Callable

from placer.placers.base import Caps, MemoryBook, does_not_fit, within_caps


class ScheduleState:
    """A partial schedule: placed nodes, their finish times, device timelines and memory.

    Memory is kept by a `MemoryBook` in placement order.
    """

    def __init__(self, graph: OpGraph, devices: list[str], cost: CostModel, caps: Caps | None,
                 frees: bool = True) -> None:
        self.graph, self.devices, self.cost = graph, list(devices), cost
        self.memory = MemoryBook(graph, devices, caps, frees, cost)
        self.caps = self.memory.caps
        self.topo_index = {n: i for i, n in enumerate(graph.nodes)}
        self.preds: dict[str, list[tuple[str, int]]] = {
            n: [(u, int(graph.dag.edges[u, n].get("bytes", 0))) for u in graph.dag.predecessors(n)]
            for n in graph.nodes}
        self.succs: dict[str, list[str]] = {
            n: sorted(graph.dag.successors(n), key=self.topo_index.__getitem__) for n in graph.nodes}
        self.times = {n: dict(zip(self.devices, map(float, op_times(cost, node, self.devices))))
                      for n, node in graph.nodes.items()}
        self.place: dict[str, str] = {}
        self.start: dict[str, float] = {}
        self.finish: dict[str, float] = {}
        self.free_at = {d: 0.0 for d in devices}            # end of the device's last node
        self.busy: dict[str, list[tuple[float, float]]] = {d: [] for d in devices}  # sorted intervals

    def arrival(self, node: str, device: str) -> float:
        """When all of `node`'s inputs can be on `device` (its producers must be placed)."""
        ready = 0.0
        for u, nbytes in self.preds[node]:
            src = self.place[u]
            t = self.finish[u] if src == device else self.finish[u] + self.cost.transfer_time(nbytes, src, device)
            ready = max(ready, t)
        return ready

    def can_run(self, node: str, device: str) -> bool:
        """The device can execute the node and has memory left for it."""
        return math.isfinite(self.times[node][device]) and self.memory.fits(node, device)

    def insertion_start(self, node: str, device: str, ready: float) -> float:
        """Earliest start >= `ready` in a gap of the device's timeline long enough for the node."""
        length = self.times[node][device]
        t = ready
        busy = self.busy[device]
        # a device's intervals never overlap, so their ends rise with their starts: those ending by
        # `ready` hold no gap after it, and the scan starts past them (on 10,000 nodes the whole
        # scan made HEFT quadratic)
        for begin, end in busy[bisect.bisect_right(busy, ready, key=itemgetter(1)):]:
            if t + length <= begin:
                return t
            t = max(t, end)
        return t

    def commit(self, node: str, device: str, start: float) -> None:
        """Place `node` on `device` starting at `start`, updating timelines and memory."""
        finish = start + self.times[node][device]
        self.memory.add(node, device)
        self.place[node], self.start[node], self.finish[node] = device, start, finish
        self.free_at[device] = max(self.free_at[device], finish)
        bisect.insort(self.busy[device], (start, finish))

    def does_not_fit(self, placer: str, node: str) -> PlacerError:
        """The error of `placer` stuck at `node` under these caps."""
        caps = {d: int(c) for d, c in self.caps.items() if math.isfinite(c)}
        return does_not_fit(placer, self.graph, caps, node, cost=self.cost)

    @property
    def makespan(self) -> float:
        return max(self.finish.values(), default=0.0)


def schedule_within_caps(graph: OpGraph, devices: list[str], caps: Caps | None, cost: CostModel,
                         schedule: Callable[[bool], ScheduleState]) -> ScheduleState:
    """Run `schedule(frees)` with memory freed as consumers are placed; if the executor would
    find the result over a cap, run it again with nothing freed (safe in any order)."""
    return within_caps(graph, devices, caps, cost, schedule, lambda state: state.place)
