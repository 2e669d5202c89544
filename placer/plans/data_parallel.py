"""The data-parallel plan (the forward step of PyTorch's DDP): every op split on its batch over the
devices, `Shard(0)`, every weight replicated, so the devices never talk until the outputs.

An op takes, of the splits its maths allows that keep its weights whole (a constant spanning the
batch, such as a recurrent net's initial state, is split with it), one its inputs need no collective for (each as its producer left it, or cut from a whole copy where it lies), and of
those one that leaves its outputs `Shard(0)`, else the first (Shape: a sharded input, a replicated
output). An op with no such split is replicated, each device computing all of it from gathered
inputs, and the plan names it (`extra["placer"]["replicated"]`).
"""

from __future__ import annotations

from collections.abc import Sequence

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph, OpNode
from placer.plans.layout import REPLICATE, Layout, Shard
from placer.plans.plan import OpPlan, Plan
from placer.plans.rules import Split, replicated, splits

NAME = "data_parallel"


def data_parallel(graph: OpGraph, devices: Sequence[str], parts: tuple[int, ...] | None = None) -> Plan:
    """DDP's plan of `graph` over `devices` (two or more); a graph with no batch to split is a PlacerError.
    With `parts` (an uneven cut, `data_parallel_by_speed`'s) a reshape of the batch is split where
    the parts map it (`rules._reshape`); the layouts stay even, for the caller to cut."""
    devices = tuple(devices)
    if len(devices) < 2:
        raise PlacerError(f"data parallelism splits the batch over two devices or more, and there is "
                          f"{len(devices)}: {', '.join(devices) or 'none'}")
    held: dict[str, Layout] = {}
    lengths = batch_lengths(graph)
    ops, whole, split_any = {}, [], False
    for name, node in graph.nodes.items():
        chosen, free, batch = batch_split(graph, node, held, lengths, len(devices), parts)
        if not free and any(node.inputs):   # a Constant is made on every device, as in DDP
            whole.append(name)
        split_any = split_any or batch
        ops[name] = OpPlan(devices, chosen.inputs, chosen.outputs)
    if not split_any:
        raise PlacerError(f"data parallelism splits the batch, and no op of {graph.source or 'the graph'} has a "
                          f"batch axis longer than 1; bind a larger batch (--input-shape NAME=BATCHx...)")
    return Plan(list(devices), ops, graph.sha256, extra={"placer": {"name": NAME, "replicated": whole}})


def batch_lengths(graph: OpGraph) -> set[int]:
    """The lengths of the graph inputs' axis 0: the batch, as a constant may also span it."""
    return {t.shape[0] for t in graph.inputs if t.shape}


def batch_split(graph: OpGraph, node: OpNode, held: dict[str, Layout], lengths: set[int],
                n: int | None = None, parts: tuple[int, ...] | None = None) -> tuple[Split, bool, bool]:
    """The node's split as DDP takes it over `n` devices given the layouts `held` so far (which it
    updates with its outputs'), whether that split needs no collective, and whether it splits the batch."""
    free = [s for s in splits(node, graph, n, parts)
            if _keeps_weights(graph, s, node.inputs, lengths) and not _needs_collective(s, node.inputs, held)]
    batch = [s for s in free if all(x == Shard(0) for t, x in zip(node.outputs, s.outputs) if t)]
    chosen = (batch or free or [replicated(node)])[0]
    held.update((t, x) for t, x in zip(node.outputs, chosen.outputs) if t)
    return chosen, bool(free), bool(batch)


def _keeps_weights(graph: OpGraph, split: Split, inputs: Sequence[str], lengths: set[int]) -> bool:
    """Whether the split keeps every weight whole, but a constant as long as the batch on axis 0
    (a recurrent net's initial state), which it may split with the batch."""
    return all(x == REPLICATE or x == Shard(0) and graph.tensors[t].shape[0] in lengths
               for t, x in zip(inputs, split.inputs) if t in graph.initializers)


def _needs_collective(split: Split, inputs: Sequence[str], held: dict[str, Layout]) -> bool:
    """Whether reading `inputs` in the split's layouts needs devices to exchange data: an input
    held otherwise than wanted, unless held whole (each device then cuts its own slice)."""
    return any(t in held and held[t] != want and held[t] != REPLICATE for t, want in zip(inputs, split.inputs))
