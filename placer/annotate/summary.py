"""Per-device figures of a placement: nodes, FLOPs, weights held, bytes crossing devices."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from placer.graph.opgraph import OpGraph
from placer.graph.structure import node_reads
from placer.placement import Placement


@dataclass
class DeviceSummary:
    """What one device holds under a placement and what it exchanges with the others."""

    device: str
    nodes: int = 0
    flops: float = 0.0
    param_bytes: int = 0      # distinct initializers its nodes read (a weight two devices read counts on both)
    bytes_sent: int = 0       # bytes of tensors it produces that other devices read (once per reader device)
    bytes_received: int = 0   # bytes of tensors other devices produce that it reads

    def to_dict(self) -> dict:
        """Plain data, for JSON."""
        return asdict(self)


def summarize(graph: OpGraph, placement: Placement) -> list[DeviceSummary]:
    """One `DeviceSummary` per device of the placement, in its device order."""
    rows = {d: DeviceSummary(d) for d in placement.devices}
    weights: dict[str, set[str]] = {d: set() for d in placement.devices}
    for name, op in graph.nodes.items():
        row = rows[placement.nodes[name]]
        row.nodes += 1
        row.flops += op.flops
        weights[row.device].update(t for t in node_reads(op.proto) if t in graph.initializers)
    for device, names in weights.items():
        rows[device].param_bytes = sum(graph.initializers[t].nbytes for t in names)
    for tensor, source, targets in crossings(graph, placement):
        size = _nbytes(graph, tensor)
        rows[source].bytes_sent += size * len(targets)
        for target in targets:
            rows[target].bytes_received += size
    return list(rows.values())


def crossings(graph: OpGraph, placement: Placement) -> list[tuple[str, str, list[str]]]:
    """(tensor, producing device, reading devices) for every tensor read on another device."""
    readers: dict[str, dict[str, None]] = {}
    for name, op in graph.nodes.items():
        for t in node_reads(op.proto):
            readers.setdefault(t, {})[placement.nodes[name]] = None
    result = []
    for name, op in graph.nodes.items():
        source = placement.nodes[name]
        for t in op.outputs:
            targets = [d for d in readers.get(t, {}) if d != source] if t else []
            if targets:
                result.append((t, source, targets))
    return result


def cross_device_bytes(graph: OpGraph, placement: Placement) -> int:
    """Total bytes moved between devices in one step (each tensor once per reading device)."""
    return sum(_nbytes(graph, t) * len(targets) for t, _, targets in crossings(graph, placement))


def _nbytes(graph: OpGraph, tensor: str) -> int:
    info = graph.tensors.get(tensor)
    return info.nbytes if info is not None else 0
