"""A training step's replicated weights, one copy per device: DDP keeps a replica of each weight on
every device and updates each where it lies, so a weight read on several devices of a lowered plan
becomes one weight per device (`<weight>@<device>`), read by that device's ops only.

The training program built on the result (`placer.costmodel.sim_program.training_program`) then
sums each replica's gradient on its own device and updates it there, with its optimizer state,
and sends no refresh: what keeps the replicas equal is the all-reduce of their gradients, which
`placer.plans.grad_sync` adds. A weight read on one device keeps its name.
"""

from __future__ import annotations

from placer.graph.opgraph import TensorInfo
from placer.plans.lower import renamed
from placer.plans.layout import REPLICATE
from placer.plans.lowered import Lowered, LoweredBuilder, SourceSlice


def own_copies(lowered: Lowered) -> tuple[Lowered, dict[str, dict[str, str]]]:
    """`lowered` with a copy per device of each weight read on several devices; weight -> device ->
    the name of its copy there."""
    graph, where = lowered.graph, lowered.placement.nodes
    readers: dict[str, dict[str, None]] = {}
    for name, node in graph.nodes.items():
        for t in node.inputs:
            if t in graph.initializers:
                readers.setdefault(t, {})[where[name]] = None
    b = LoweredBuilder(graph, list(lowered.placement.devices))
    b.tensors.update(graph.tensors)
    copies: dict[str, dict[str, str]] = {}
    for t in graph.inputs:
        b.add_source(t, weight=False)
    for name, info in graph.initializers.items():
        devices = list(readers.get(name, ()))
        if len(devices) < 2:
            b.add_source(info, weight=True)
            continue
        origin = lowered.slices.get(name, SourceSlice(name, REPLICATE, 0, 1))
        copies[name] = {d: b.add_source(TensorInfo(b.unique(f"{name}@{d}"), info.shape, info.dtype), weight=True,
                                        origin=origin) for d in devices}
    for name, node in graph.nodes.items():
        device = where[name]
        read = tuple(copies[t][device] if t in copies else t for t in node.inputs)
        b.add(node if read == node.inputs else renamed(node, name, read, node.outputs), device)
    b.helpers.update(lowered.helpers)
    b.shard_of.update(lowered.shard_of)
    b.slices.update((t, origin) for t, origin in lowered.slices.items() if t not in copies)
    rebuilt = b.build(lowered.outputs, lowered.placement.graph_sha256 or "")
    return rebuilt, copies
