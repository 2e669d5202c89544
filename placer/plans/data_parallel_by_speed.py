"""Data parallelism over devices of unequal speed: DDP's plan (`data_parallel.py`), but the batch
cut unevenly, each device's slice in proportion to its speed (`Shard(0, parts=...)`), so that
a fast GPU beside a slow one is not held to the slow one's pace, as heterogeneity-aware
trainers (e.g. HetPipe, Park et al. 2020; Cephalo) size each worker's batch.

A device's speed is one over the time the cost model gives it for the whole graph at the whole
batch; a device whose share rounds to no sample is left out. Devices equally fast have nothing to
gain over the even split, and the builder says so.

Given each device's busy seconds in a cut (`busy`, `placer.plans.busy` on a described cluster), the
cut is balanced as a user profiling each worker would: a device's speed is then the samples of its
own slice per second of its own work, and the batch is cut again by those speeds, for up to
`BALANCE_ROUNDS` rounds, keeping the cut whose busiest device is least busy. The speed on the
whole batch is not the speed on a slice: a slow GPU's weight reads, launches and (training) its
full update are the same on fewer samples (the Transformer over 2 V100s and 2 K40s: 24:24:8:8 by
the whole graph leaves the K40s 203 ms busy against the V100s' 172; 25:25:7:7 183 against 178).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from placer.costmodel.protocol import CostModel
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.plans.data_parallel import batch_lengths, data_parallel
from placer.plans.layout import Layout, Shard, shard_sizes
from placer.plans.plan import OpPlan, Plan

NAME = "data_parallel_by_speed"
_RESOLUTION = 1_000_000   # speeds as integer parts, relative to the fastest
BALANCE_ROUNDS = 6        # cuts tried when balancing; it settles in one or two on the zoo's models

Busy = Callable[[Plan], Mapping[str, float]]   # a plan -> each device's busy seconds in its step


def batch_shares(graph: OpGraph, devices: Sequence[str], cost: CostModel) -> dict[str, int]:
    """Each device's number of samples of the batch, in proportion to its speed under `cost`."""
    return _cut(graph, devices, _whole_speeds(graph, devices, cost))


def balanced_shares(graph: OpGraph, devices: Sequence[str], cost: CostModel, busy: Busy) -> dict[str, int]:
    """Each device's samples, cut again by its speed on its own slice until its busiest device is
    least busy (the module's docstring)."""
    speeds = _whole_speeds(graph, devices, cost)
    shares = _cut(graph, devices, speeds)
    best, tried = None, []
    while len(tried) < BALANCE_ROUNDS and shares not in tried and sum(s > 0 for s in shares.values()) >= 2:
        tried.append(shares)
        seconds = busy(_plan(graph, shares))
        slowest = max(seconds.get(d, 0.0) for d, s in shares.items() if s > 0)
        if best is None or slowest < best[0]:
            best = (slowest, shares)
        # samples per second of its own work; a device left out keeps its speed on the whole batch
        speeds = [shares[d] / seconds[d] if shares[d] > 0 and seconds.get(d) else v for d, v in zip(devices, speeds)]
        shares = _cut(graph, devices, speeds)
    return best[1] if best else shares


def data_parallel_by_speed(graph: OpGraph, devices: Sequence[str], cost: CostModel, busy: Busy | None = None) -> Plan:
    """DDP's plan over `devices` with each device's slice of the batch in proportion to its speed;
    given `busy`, its speed on its own slice (`balanced_shares`)."""
    shares = balanced_shares(graph, devices, cost, busy) if busy else batch_shares(graph, devices, cost)
    if len(set(shares.values())) < 2:   # every device in, alike: DDP's plan (one left out is a plan of its own)
        raise PlacerError(f"the batch splits evenly over {', '.join(devices)} (their speeds are equal, or "
                          "the batch too short to tell them apart); data_parallel is this plan")
    plan = _plan(graph, shares)
    plan.extra["placer"]["balanced"] = busy is not None
    return plan


def _whole_speeds(graph: OpGraph, devices: Sequence[str], cost: CostModel) -> list[float]:
    """Each device's samples per second on the whole batch under `cost` (inf where it takes no time)."""
    batch = _batch(graph)
    times = [sum(cost.op_time(node, d) for node in graph.nodes.values()) for d in devices]
    return [batch / t if t > 0 else float("inf") for t in times]


def _cut(graph: OpGraph, devices: Sequence[str], speeds: Sequence[float]) -> dict[str, int]:
    """The batch cut in proportion to `speeds` (one per device; inf: as fast as the fastest)."""
    fastest = max((s for s in speeds if s != float("inf")), default=1.0) or 1.0
    weights = tuple(_RESOLUTION if s == float("inf") else max(1, round(_RESOLUTION * s / fastest)) for s in speeds)
    return dict(zip(devices, shard_sizes(_batch(graph), len(devices), weights)))


def _batch(graph: OpGraph) -> int:
    lengths = batch_lengths(graph)
    if not lengths:
        raise PlacerError(f"{NAME} splits the batch, and {graph.source or 'the graph'} has no input with one")
    return max(lengths)


def _plan(graph: OpGraph, cut: Mapping[str, int]) -> Plan:
    """DDP's plan over the devices with a share, each cut its share of the batch."""
    shares = {d: s for d, s in cut.items() if s > 0}
    kept = list(shares)
    parts = tuple(shares.values())
    even = data_parallel(graph, kept, parts)   # its reshapes of the batch mapped for these parts

    def uneven(x: Layout) -> Layout:
        return Shard(x.dim, parts) if isinstance(x, Shard) else x

    ops = {name: OpPlan(op.devices, tuple(map(uneven, op.inputs)), tuple(map(uneven, op.outputs)))
           for name, op in even.ops.items()}
    left_out = [d for d, s in cut.items() if s == 0]
    extra = {"placer": {**even.extra["placer"], "name": NAME, "shares": shares, "left_out": left_out}}
    return Plan(kept, ops, graph.sha256, extra=extra)


def describe(plan: Plan) -> str:
    """The plan in a line, for its row in a comparison."""
    held = plan.extra["placer"]
    speed = "its speed on its own slice" if held.get("balanced") else "its speed"
    line = (f"a plan, not a placement: every op split on its batch in proportion to each device's {speed} ("
            + ", ".join(f"{d} {s}" for d, s in held["shares"].items()) + " samples), weights replicated")
    if held.get("left_out"):
        line += f"; {', '.join(held['left_out'])} left out (too slow for one sample to pay its way)"
    return line
