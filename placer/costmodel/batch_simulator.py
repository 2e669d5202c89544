"""The simulator's pass over many placements at once: numpy over the batch axis, the same results.

`simulate_batch(sim, assign)` gives, for every row of `assign`, exactly the step time, the peaks
and the failure `Simulator.simulate` gives for that row: the same list schedule (each device runs
its steps one at a time in the program's order; each copy starts when its producer has finished
and every link of its route is free, the copies of one tensor in device order), the same float
operations in the same order, so the figures are equal, not close. Learning across a corpus needs
thousands of simulated placements per second; one placement at a time through `Simulator.simulate`
is a Python loop over the nodes per placement, here it is a Python loop over the nodes per batch.

How the pass is laid out, for speed:

- Rows are simulated in chunks (`MAX_ROWS`). Every per-device or per-link quantity is a
  (devices x rows) array stored flat, so reading "the value on row b's own device" is one
  `np.take` with a precomputed index (device * rows + b).
- The copies a chunk makes are listed once, before the walk, tensor by tensor in rounds: round k
  holds each row's k-th copy of the tensor (in destination order), at most one per row, so a
  round is a few vectorised operations over the rows that copy; the rounds run in turn because a
  row's copies of one tensor may wait for each other's links.
- Memory: a tensor is live on a device from its allocation to its free. Every device's events net
  to zero, so after sorting each row's events by (device, time) one cumulative sum gives every
  device's live bytes, and the peak is the largest value at the end of a run of equal times (the
  one-placement pass sorts frees first at equal times; the value at the end of such a run does not
  depend on the order inside it, and no value inside it exceeds the larger of its two ends). A
  search needs only whether a row is out of memory: with `peaks=False` the sort is skipped unless
  the bytes ever allocated on some device could exceed its cap.

Not batched, simulated row by row with `Simulator.simulate`: a 1F1B pipelined step, whose order
of steps differs per placement. Contention (`slowdown` above 1) is added per row from the batched
schedule with the same functions the one-placement pass uses.

This module reads a `placer.costmodel.simulator.Simulator` through its public view `Simulator.tables`
(`placer.costmodel.sim_tables`) and does not import it: the simulator imports this module (its
`SimulatedMeasurer.measure_many` simulates a batch).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from placer.costmodel.contention import contention_extra, overlap_seconds
from placer.costmodel.sim_tables import SimulatorTables
from placer.measure.measurement import INVALID, OOM
from placer.program.walk import walk

# Rows simulated together: large enough that numpy's per-call cost is small beside its work per
# row, small enough that the (tensors x devices x rows) arrays stay in a few tens of MB.
MAX_ROWS = 1024
_CELLS = 1 << 22   # tensors x devices x rows per chunk at most (about 32 MB per float array)
# A (device, time) pair packs into one int64 sort key when devices x the span of the times' bit
# patterns stays under this; otherwise two sorts (time, then device) give the same order.
_KEY_LIMIT = 1 << 62


@dataclass
class BatchResult:
    """Many simulated steps: times (inf where invalid; an out-of-memory row keeps its time), peaks
    (placements x devices), failures (None where the row ran)."""

    step_time: np.ndarray
    peak_memory: np.ndarray | None   # None: not asked for (`simulate_batch(peaks=False)`)
    failure: list[str | None]


class _Plan:
    """The simulator's tables laid out for the batched pass."""

    def __init__(self, tables: SimulatorTables) -> None:
        self.n, self.D, self.T = len(tables.op_time), tables.devices, len(tables.t_bytes)
        D = self.D
        self.op_time = tables.op_time
        self.producer = tables.t_producer
        self.t_bytes = tables.t_bytes
        self.copy_bytes = tables.t_copy_bytes   # a copy on another device (an updated parameter: its bytes)
        self.is_output = tables.t_is_output
        self.out_tensors = tables.out_tensors
        # A copy's pair is src * D + dst. xfer[t * D * D + pair]: seconds to copy tensor t.
        self.xfer = tables.t_xfer.ravel()
        # routes[:, pair]: the links the copy occupies, padded with its own first link (a repeated
        # link changes neither the wait nor the update). A copy over an empty route (a cost model's
        # hand-over that occupies no link) neither waits nor holds up another: its column is the
        # spare link `links`, which reads 0 at every copy (the pass resets it after each round), so
        # the copy starts when its producer finishes and its end counts toward nothing. A pair
        # with src == dst never copies.
        self.links = tables.links
        width = max((len(r) for r in tables.pair_links), default=0) or 1
        self.routes = np.full((width, D * D), self.links, dtype=np.int64)
        for pair, route in enumerate(tables.pair_links):
            if route:
                self.routes[:, pair] = list(route) + [route[0]] * (width - len(route))
        self.spare = any(not tables.pair_links[s * D + d] for s in range(D) for d in range(D) if s != d)
        # Consumer edges (tensor, reading step) grouped by their rank among the tensor's readers, so
        # within one group no tensor repeats and a vectorised write has no two rows on one cell.
        e_tensor = tables.e_tensor
        rank = np.zeros(len(e_tensor), dtype=np.int64)
        for k in range(1, len(rank)):
            rank[k] = rank[k - 1] + 1 if e_tensor[k] == e_tensor[k - 1] else 0
        self.ranks = [(e_tensor[rank == r], tables.e_consumer[rank == r])
                      for r in range(int(rank.max(initial=-1)) + 1)]
        self.edge_tensor = e_tensor[np.argsort(rank, kind="stable")]   # the edges in rank order
        # Resident data read by one step is on that step's device; data read by several, on each
        # of their devices once.
        readers = np.bincount(tables.r_edge, minlength=len(tables.r_bytes))
        alone = readers[tables.r_edge] == 1
        self.lone_bytes, self.lone_reader = tables.r_bytes[tables.r_edge[alone]], tables.r_reader[alone]
        shared = np.flatnonzero(readers > 1)
        self.shared_bytes = tables.r_bytes[shared]
        self.shared_edge = np.searchsorted(shared, tables.r_edge[~alone])
        self.shared_reader = tables.r_reader[~alone]
        every = np.concatenate([self.op_time.ravel(), self.xfer])
        self.shortest = float(np.min(every, where=every > 0, initial=np.inf))   # the smallest positive time
        self.rows = int(max(1, min(MAX_ROWS, _CELLS // max(1, self.T * D, self.n))))


_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _plan(tables: SimulatorTables) -> _Plan:
    plan = _PLANS.get(tables)
    if plan is None:
        plan = _PLANS[tables] = _Plan(tables)
    return plan


def simulate_batch(sim: Any, assign: np.ndarray, peaks: bool = True) -> BatchResult:
    """Simulate every row of `assign` (a device index per node, in graph order) on the simulator
    `sim`: exactly `sim.simulate(row)`'s step time, peaks and failure for each row. With
    `peaks=False` the peaks are not worked out (`peak_memory` is None) unless the memory caps
    need them: the step times and failures (out of memory included) stay exact, and that is what
    a search needs."""
    tables = sim.tables
    A = np.asarray(assign, dtype=np.int64).reshape(-1, tables.nodes)
    if tables.ordered_per_placement:   # 1F1B: each row's own order of the steps
        results = [sim.simulate(tuple(row)) for row in A.tolist()]
        return BatchResult(np.asarray([r.step_time for r in results], dtype=np.float64),
                           np.asarray([r.peak_memory for r in results], dtype=np.int64).reshape(-1, tables.devices),
                           [r.failure for r in results])
    plan = _plan(tables)
    A = A[:, tables.step_node]   # each simulated step on its node's device
    parts = [_simulate_rows(plan, tables, A[i:i + plan.rows], peaks) for i in range(0, len(A), plan.rows)]
    if not parts:
        return BatchResult(np.zeros(0), np.zeros((0, plan.D), dtype=np.int64) if peaks else None, [])
    return BatchResult(np.concatenate([p.step_time for p in parts]),
                       np.concatenate([p.peak_memory for p in parts]) if peaks else None,
                       [f for p in parts for f in p.failure])


def _simulate_rows(plan: _Plan, tables: SimulatorTables, A: np.ndarray, peaks: bool) -> BatchResult:
    """One chunk of rows (each a device per simulated step)."""
    B = A.shape[0]
    n, D = plan.n, plan.D
    caps = np.array([c if c is not None else np.iinfo(np.int64).max for c in tables.mem_caps], dtype=np.int64)
    invalid = np.isinf(plan.op_time[np.arange(n)[None, :], A]).any(axis=1)
    steps = np.ascontiguousarray(np.where(invalid[:, None], 0, A).T)   # (steps, rows); a failed row runs harmlessly
    schedule = _schedule(plan, tables, steps)
    step = schedule.step
    # Peaks are worked out when asked for, or when some row could be over a cap: no device holds
    # more than everything ever allocated on it.
    top = _peaks(plan, steps, schedule) if peaks or (_bound(plan, steps, schedule) > caps).any() else None
    if any(s > 1.0 for s in tables.slowdown):
        step = step + np.asarray([contention_extra(overlap_seconds(schedule.start[:, b], schedule.finish[:, b],
                                                                   steps[:, b], D), tables.slowdown)
                                  for b in range(B)])
    oom = (top > caps[None, :]).any(axis=1) if top is not None else np.zeros(B, dtype=bool)
    failure = [INVALID if bad else OOM if over else None for bad, over in zip(invalid.tolist(), oom.tolist())]
    return BatchResult(np.where(invalid, np.inf, step), np.where(invalid[:, None], 0, top) if top is not None else None,
                       failure)


@dataclass
class _Schedule:
    """The batched schedule, every array with rows last."""

    start: np.ndarray        # (steps, rows)
    finish: np.ndarray       # (steps, rows)
    step: np.ndarray         # (rows,) the uncontended step time
    sent: np.ndarray         # (tensors, rows): its producer's finish and its copies' ends, the latest
    edges: np.ndarray        # (edges, rows): each reading edge's flat (tensor, device, row) index
    copies: np.ndarray       # (edges, rows) bool: the edge is its tensor's first reader on a device
    #                          other than the producer's, so its tensor is copied there
    made: "_Copies"          # the copies, with their start and end


def _schedule(plan: _Plan, tables: SimulatorTables, steps: np.ndarray) -> _Schedule:
    """`Simulator.simulate`'s walk for every row at once."""
    n, B = steps.shape
    D, T = plan.D, plan.T
    rows = np.arange(B)
    at = steps * B + rows                                  # flat (device, row) index of each step
    op_time = plan.op_time[np.arange(n)[:, None], steps]   # (steps, rows)
    src = steps[plan.producer]                             # (tensors, rows)

    # Which devices read each tensor, edge rank by edge rank (the first reader there makes the copy).
    read = np.zeros(T * D * B, dtype=bool)
    edges, copies = [], []
    for tensors, readers in plan.ranks:
        flat = (tensors[:, None] * D + steps[readers]) * B + rows
        first = ~read[flat]
        read[flat] = True
        edges.append(flat)
        copies.append(first & (steps[readers] != src[tensors]))
    read[((np.arange(T)[:, None] * D + src) * B + rows).ravel()] = False
    made = _Copies(plan, read.reshape(T, D, B), src)

    start, finish = np.empty((n, B)), np.empty((n, B))
    dev_free = np.zeros(D * B)
    link_free = np.zeros((plan.links + 1) * B)   # the real links', then the spare's (`_Plan.routes`)
    spare = link_free[plan.links * B:] if plan.spare else None
    sent = np.empty((T, B))
    width = plan.routes.shape[0]

    side, side_end = tables.side, np.zeros(B)

    def run_step(i: int, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Start when the device is free (a side step: at once) and every input has arrived; send
        the outputs on."""
        here = at[i]
        if side[i]:
            start[i] = 0.0
            ready = start[i]
        else:
            ready = np.take(dev_free, here, out=start[i])
        for arrival in inputs:
            np.maximum(ready, np.take(arrival, here), out=ready)
        fin = np.add(ready, op_time[i], out=finish[i])
        if side[i]:
            np.maximum(side_end, fin, out=side_end)
        else:
            dev_free[here] = fin
        outputs = []
        for t in plan.out_tensors[i]:
            arrival = np.tile(fin, D)   # (device, row) flat: here at once, elsewhere once copied
            rounds = made.rounds[t]
            for a, b in rounds:
                # the k-th copy of each row that copies the tensor k times or more: one per row, so
                # independent of each other; a row's copies wait for each other's links in turn
                links = made.links[:, a:b]
                s = np.take(link_free, links[0], out=made.start[a:b])
                for w in range(1, width):
                    np.maximum(s, np.take(link_free, links[w]), out=s)
                np.maximum(s, np.take(fin, made.row[a:b]), out=s)
                e = np.add(s, made.seconds[a:b], out=made.end[a:b])
                for w in range(width):
                    link_free[links[w]] = e
                if spare is not None:
                    spare[:] = 0.0
            if rounds:
                a, b = rounds[0][0], rounds[-1][1]
                arrival[made.target[a:b]] = made.end[a:b]
                arrival.reshape(D, B).max(axis=0, out=sent[t])
            else:
                sent[t] = fin
            outputs.append(arrival)
        return outputs

    for _ in walk(tables.steps, tables.frees, {}, run_step):
        pass
    step = (np.maximum(np.maximum(dev_free.reshape(D, B).max(axis=0), link_free.reshape(-1, B).max(axis=0)),
                       side_end)   # the spare: 0
            if n else np.zeros(B))
    empty = np.zeros((0, B), dtype=np.int64)
    return _Schedule(start, finish, step, sent, np.concatenate(edges) if edges else empty,
                     np.concatenate(copies) if copies else empty.astype(bool), made)


class _Copies:
    """Every copy one chunk makes, grouped by tensor and by round: a row's k-th copy of a tensor
    (in destination order, as the one-placement pass sends them) is in the tensor's round k."""

    def __init__(self, plan: _Plan, copied: np.ndarray, src: np.ndarray) -> None:
        T, D, B = copied.shape
        index = np.flatnonzero(copied)                 # by tensor, then destination, then row
        if T * D * B < 1 << 31:                        # half the memory traffic of int64
            index = index.astype(np.int32)
        tensor, dst, row = index // (D * B), index // B % D, index % B
        bounds = np.searchsorted(tensor, np.arange(T + 1)).tolist()
        # Most tensors are copied at most once per row: one round, in this order. Where some row
        # copies one several times, its copies are ordered by round (stably: rows stay apart).
        per_row = copied.sum(axis=1, dtype=np.int16 if D < 1 << 15 else np.int64)
        several = np.flatnonzero(per_row.max(axis=1, initial=0) > 1).tolist()
        self.rounds: list[list[tuple[int, int]]] = [[(bounds[t], bounds[t + 1])] if bounds[t + 1] > bounds[t] else []
                                                    for t in range(T)]
        if several:
            order = np.arange(len(tensor))
            for t in several:
                a, b = bounds[t], bounds[t + 1]
                earlier = np.cumsum(copied[t], axis=0) - copied[t]       # copies of the row to lower devices
                turn = earlier[dst[a:b], row[a:b]]
                by_turn = np.argsort(turn, kind="stable")
                order[a:b] = a + by_turn
                cut = (a + np.flatnonzero(np.diff(turn[by_turn])) + 1).tolist()
                self.rounds[t] = list(zip([a, *cut], [*cut, b]))
            tensor, dst, row = tensor[order], dst[order], row[order]
        self.tensor, self.dst, self.row = tensor, dst, row
        pair = src.ravel()[tensor * B + row] * D + dst
        self.target = dst * B + row                                      # flat (device, row) of the arrival
        self.links = plan.routes[:, pair].astype(index.dtype) * B + row  # (route width, copies)
        self.seconds = plan.xfer[tensor * (D * D) + pair]
        self.start, self.end = np.empty(len(tensor)), np.empty(len(tensor))


def _bound(plan: _Plan, steps: np.ndarray, s: _Schedule) -> np.ndarray:
    """(rows, devices): every byte ever allocated on each device, at least its peak."""
    B = steps.shape[1]
    src = steps[plan.producer]
    produced = np.bincount((src * B + np.arange(B)).ravel(), np.broadcast_to(plan.t_bytes[:, None], src.shape).ravel(),
                           minlength=plan.D * B)
    copied = np.bincount(s.made.target, plan.copy_bytes[s.made.tensor], minlength=plan.D * B)
    return (_resident(plan, steps) + (produced + copied).reshape(plan.D, B)).T


def _peaks(plan: _Plan, steps: np.ndarray, s: _Schedule) -> np.ndarray:
    """`Simulator._peak_memory` for every row: (rows x devices) bytes."""
    B = steps.shape[1]
    D, T = plan.D, plan.T
    rows = np.arange(B)
    # When the last reader of each tensor on each device finishes (-inf: none there).
    last_read = np.full(T * D * B, -np.inf)
    for (tensors, readers), flat in zip(plan.ranks, np.split(s.edges, np.cumsum([len(t) for t, _ in plan.ranks]))):
        last_read[flat] = np.maximum(last_read[flat], s.finish[readers])
    copy_start, copy_end = np.empty(T * D * B), np.empty(T * D * B)
    made = (s.made.tensor.astype(np.int64) * D + s.made.dst) * B + s.made.row
    copy_start[made] = s.made.start
    copy_end[made] = s.made.end
    # A produced tensor lives on its producer's device from the step's start until its last reader
    # there and its copies are done (an output: until the step ends); a copy lives on its
    # destination from the transfer's start until its last reader there. A reading edge that makes
    # no copy allocates and frees at time 0 on its device: a pair that nets to nothing at once.
    src = steps[plan.producer]
    free = np.maximum(last_read[(np.arange(T)[:, None] * D + src) * B + rows], s.sent)
    free = np.where(plan.is_output[:, None], s.step[None, :], free)
    copy_dev = s.edges // B % D
    copy_alloc = np.where(s.copies, copy_start[s.edges], 0.0)
    copy_free = np.where(s.copies, np.maximum(last_read[s.edges], copy_end[s.edges]), 0.0)
    times = np.concatenate([s.start[plan.producer], free, copy_alloc, copy_free]) + 0.0   # no -0.0
    devs = np.concatenate([src, src, copy_dev, copy_dev])
    deltas = np.concatenate([plan.t_bytes, -plan.t_bytes, plan.copy_bytes[plan.edge_tensor],
                             -plan.copy_bytes[plan.edge_tensor]])
    # a positive time is a sum of op and copy times, so at least the smallest positive one of them
    return _resident(plan, steps).T + _live_peaks(times, devs, deltas, D, plan.shortest, float(s.step.max(initial=0.0)))


def _resident(plan: _Plan, steps: np.ndarray) -> np.ndarray:
    """(devices, rows): the bytes of weights, graph inputs and optimizer state on each device that reads them."""
    B = steps.shape[1]
    rows = np.arange(B)
    lone = np.bincount((steps[plan.lone_reader] * B + rows).ravel(),
                       np.broadcast_to(plan.lone_bytes[:, None], (len(plan.lone_bytes), B)).ravel(),
                       minlength=plan.D * B).astype(np.int64)
    present = np.zeros((len(plan.shared_bytes), plan.D * B), dtype=bool)
    present[plan.shared_edge[:, None], steps[plan.shared_reader] * B + rows] = True
    return (lone + np.tensordot(plan.shared_bytes, present, axes=1)).reshape(plan.D, B)


def _live_peaks(times: np.ndarray, devs: np.ndarray, deltas: np.ndarray, D: int, smallest: float,
                largest: float) -> np.ndarray:
    """Per row and device, the largest running sum of the events' `deltas` (allocations and frees,
    the same for every row) over that device's events in time order, taken where a run of equal
    times ends, at least 0. `times` and `devs` are (events, rows); every time is 0 or between
    `smallest` and `largest`. Each device's events sum to zero, so one running sum over each row's
    (device, time) order serves every device."""
    E, B = times.shape
    if E == 0:
        return np.zeros((B, D), dtype=np.int64)
    # (row, device) segments in row-major order, counted before sorting
    counts = np.bincount((devs + np.arange(B) * D).ravel(), minlength=B * D)
    bits = times.view(np.int64)   # non-negative floats order as their bit patterns do
    low = int(np.float64(smallest).view(np.int64)) if smallest <= largest else 1   # else every time is 0
    span = max(int(np.float64(largest).view(np.int64)) - low + 2, 2)
    if D * span < _KEY_LIMIT:   # one sort of (device, time) packed into an int64: 0.0 first, then the rest
        key = devs * span
        key += np.maximum(bits - (low - 1), 0)
        key = np.ascontiguousarray(key.T)
        order = np.argsort(key, axis=1)
        key = key.ravel()[order + (np.arange(B) * E)[:, None]]   # np.take_along_axis, faster
        ends = key[:, 1:] != key[:, :-1]
    else:                       # two: by time, then stably by device
        times, devs = np.ascontiguousarray(times.T), np.ascontiguousarray(devs.T)
        by_time = np.argsort(times, axis=1)
        order = np.take_along_axis(by_time, np.argsort(np.take_along_axis(devs, by_time, 1), axis=1, kind="stable"), 1)
        times, devs = np.take_along_axis(times, order, 1), np.take_along_axis(devs, order, 1)
        ends = (times[:, 1:] != times[:, :-1]) | (devs[:, 1:] != devs[:, :-1])
    live = np.cumsum(deltas[order], axis=1)
    live[:, :-1][~ends] = 0   # only the ends of runs count
    starts = np.cumsum(counts) - counts
    top = np.maximum.reduceat(live.ravel(), np.minimum(starts, live.size - 1))
    return np.where(counts > 0, np.maximum(top, 0), 0).reshape(B, D)
