"""The fully sharded data-parallel plan (PyTorch FSDP, ZeRO-3), for a training step: DDP's split of
every op on its batch (`data_parallel.py`), but each weight stored `Shard(0)` over the devices, so
each holds 1/n of the weights, of their gradients and of their optimizer state. A weight is
all-gathered before its readers use it; the backward of that all-gather, which the training
program makes by sending gradients back over the ring's copies, is the reduce-scatter of its
gradient. A weight too short to cut n ways (axis 0 shorter than the devices) stays replicated, its
gradient all-reduced as DDP's.
"""

from __future__ import annotations

from collections.abc import Sequence

from placer.graph.opgraph import OpGraph
from placer.plans.data_parallel import data_parallel
from placer.plans.layout import REPLICATE, Shard
from placer.plans.plan import Plan
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
    plan.extra["placer"].update(name=NAME, stored=stored)
    return plan
