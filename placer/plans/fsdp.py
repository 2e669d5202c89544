"""The fully sharded data-parallel plan (PyTorch FSDP, ZeRO-3), for a training step: DDP's split of
every op on its batch (`data_parallel.py`), but each weight stored `Shard(0)` over the devices, so
each holds 1/n of the weights, of their gradients and of their optimizer state. A weight is
all-gathered before its readers use it; the backward of that all-gather, which the training
program makes by sending gradients back over the ring's copies, is the reduce-scatter of its
gradient. A weight too short to cut n ways (axis 0 shorter than the devices) stays replicated, its
gradient all-reduced as DDP's.

The weights stored sharded and the devices they are sharded over are the plan's
(`extra["placer"]["stored"]` and `["stored_on"]`); a search that moves ops keeps a weight stored so
only while every reader still reads it whole over those devices (`still_stored`), as FSDP's
gathers and reduce-scatters are made for such readers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from placer.graph.opgraph import OpGraph
from placer.plans.data_parallel import data_parallel
from placer.plans.layout import REPLICATE, Shard
from placer.plans.plan import OpPlan, Plan
from placer.program.training import is_float

NAME = "fsdp"


def fsdp(graph: OpGraph, devices: Sequence[str]) -> Plan:
    """FSDP's plan of `graph` over `devices` (two or more; a graph with no batch: a PlacerError)."""
    plan = data_parallel(graph, devices)
    n = len(plan.devices)
    read_whole = {t for name, op in plan.ops.items() if len(op.devices) == n
                  for t, x in zip(graph.nodes[name].inputs, op.inputs) if x == REPLICATE}
    stored = {w: str(Shard(0)) for w, info in graph.initializers.items()
              if w in read_whole and is_float(graph, w) and info.shape and info.shape[0] >= n
              and w not in graph.constants.values()}
    plan.extra["placer"].update(name=NAME, stored=stored, stored_on=list(plan.devices))
    return plan


def still_stored(graph: OpGraph, before: Plan, ops: Mapping[str, OpPlan]) -> dict[str, Any]:
    """`before`'s stored weights (and where) that `ops` still read as FSDP's readers do: every reader
    over the stored devices reading the weight `Replicate()`; the extra of a plan of `ops` (empty: none)."""
    held = before.extra.get("placer", {})
    on = tuple(held.get("stored_on", before.devices))
    readers: dict[str, list[tuple[OpPlan, int]]] = {}
    for name, node in graph.nodes.items():
        for k, t in enumerate(node.inputs):
            if t in held.get("stored", {}):
                readers.setdefault(t, []).append((ops[name], k))
    kept = {w: layout for w, layout in held.get("stored", {}).items()
            if readers.get(w) and all(op.devices == on and op.inputs and op.inputs[k] == REPLICATE
                                      for op, k in readers[w])}
    return {"stored": kept, "stored_on": list(on)} if kept else {}
