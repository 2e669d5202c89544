"""Data parallelism over devices of unequal speed: DDP's plan (`data_parallel.py`), but the batch
cut unevenly, each device's slice in proportion to its speed (`Shard(0, parts=...)`), so that
a fast GPU beside a slow one is not held to the slow one's pace, as heterogeneity-aware
trainers (e.g. HetPipe, Park et al. 2020; Cephalo) size each worker's batch.

A device's speed is one over the time the cost model gives it for the whole graph at the whole
batch; a device whose share rounds to no sample is left out. Devices equally fast have nothing to
gain over the even split, and the builder says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from placer.costmodel.protocol import CostModel
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.plans.data_parallel import batch_lengths, data_parallel
from placer.plans.layout import Layout, Shard, shard_sizes
from placer.plans.plan import OpPlan, Plan

NAME = "data_parallel_by_speed"
_RESOLUTION = 1_000_000   # speeds as integer parts, relative to the fastest


def batch_shares(graph: OpGraph, devices: Sequence[str], cost: CostModel) -> dict[str, int]:
    """Each device's number of samples of the batch, in proportion to its speed under `cost`."""
    lengths = batch_lengths(graph)
    if not lengths:
        raise PlacerError(f"{NAME} splits the batch, and {graph.source or 'the graph'} has no input with one")
    batch = max(lengths)
    times = [sum(cost.op_time(node, d) for node in graph.nodes.values()) for d in devices]
    fastest = min(times)
    weights = tuple(max(1, round(_RESOLUTION * fastest / t)) if t > 0 else _RESOLUTION for t in times)
    return dict(zip(devices, shard_sizes(batch, len(devices), weights)))


def data_parallel_by_speed(graph: OpGraph, devices: Sequence[str], cost: CostModel) -> Plan:
    """DDP's plan over `devices` with each device's slice of the batch in proportion to its speed."""
    shares = {d: s for d, s in batch_shares(graph, devices, cost).items() if s > 0}
    if len(set(shares.values())) < 2:
        raise PlacerError(f"the batch splits evenly over {', '.join(devices)} (their speeds are equal, or "
                          "the batch too short to tell them apart); data_parallel is this plan")
    kept = list(shares)
    parts = tuple(shares.values())
    even = data_parallel(graph, kept, parts)   # its reshapes of the batch mapped for these parts

    def uneven(x: Layout) -> Layout:
        return Shard(x.dim, parts) if isinstance(x, Shard) else x

    ops = {name: OpPlan(op.devices, tuple(map(uneven, op.inputs)), tuple(map(uneven, op.outputs)))
           for name, op in even.ops.items()}
    extra = {"placer": {**even.extra["placer"], "name": NAME, "shares": shares}}
    return Plan(kept, ops, graph.sha256, extra=extra)


def describe(plan: Plan) -> str:
    """The plan in a line, for its row in a comparison."""
    shares = plan.extra["placer"]["shares"]
    return ("a plan, not a placement: every op split on its batch in proportion to each device's speed ("
            + ", ".join(f"{d} {s}" for d, s in shares.items()) + " samples), weights replicated")
