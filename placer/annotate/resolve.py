"""Check a placement against a graph and this machine, renaming devices with --map first."""

from __future__ import annotations

from placer.devices import cuda_count, mixes_cpu_with_virtual_cpus, not_on_this_machine, parse_device
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.graph.placement_check import assignment, unplaced
from placer.placement import Placement

_SHOWN = 5  # how many offending names a message lists


def parse_device_map(items: list[str] | None) -> dict[str, str]:
    """["cuda:1=cuda:0", ...] -> {"cuda:1": "cuda:0"}; device names are canonical ("cuda" -> "cuda:0")."""
    mapping: dict[str, str] = {}
    for item in items or []:
        source, sep, target = item.partition("=")
        if not sep or not source.strip() or not target.strip():
            raise PlacerError(f"cannot read --map {item!r}; write it as FROM=TO, e.g. --map cuda:1=cuda:0")
        source, target = parse_device(source).name, parse_device(target).name
        if source in mapping and mapping[source] != target:
            raise PlacerError(f"--map gives two targets for {source} ({mapping[source]}, {target}); give one")
        mapping[source] = target
    return mapping


def resolve_placement(graph: OpGraph, placement: Placement, device_map: dict[str, str] | None = None,
                      *, check_devices: bool = True) -> Placement:
    """`placement` checked against `graph` and renamed by `device_map`, nodes in graph order.

    Refuses (PlacerError) a placement made for another graph (hash mismatch), node names the
    graph does not have, graph nodes it does not place, and — with `check_devices` — devices this
    machine does not have. Writing annotations (`placer apply`, `placer show`) passes
    ``check_devices=False``: a placement for a GPU machine can be written and looked at anywhere."""
    device_map = device_map or {}
    if not graph.is_named_by(placement.graph_sha256):
        raise PlacerError(
            f"the placement was made for another graph (sha256 {placement.graph_sha256[:12]}…, "
            f"{graph.source or 'this graph'} has {graph.sha256[:12]}…); make one for this graph "
            "(placer train), or use the model file it was made for")
    unknown = [n for n in placement.nodes if n not in graph.nodes and n not in graph.constants]
    if unknown:
        raise PlacerError(f"the placement names {len(unknown)} node(s) that {graph.source or 'the graph'} "
                          f"does not have: {_few(unknown)}; node names are the ONNX node names "
                          "(placer inspect --json lists them)")
    # On top of the one check (`assignment`, below): the hash, node names the graph lacks, --map
    # and this machine's devices. A node left out is refused first, in the CLI's fuller words
    # (the graph's node count, up to five names), before --map is read.
    missing = unplaced(graph, placement)
    if missing:
        raise PlacerError(f"the placement does not place {len(missing)} of the graph's {len(graph.nodes)} "
                          f"node(s): {_few(missing)}; give every node a device")

    canonical = {d: parse_device(d).name for d in placement.devices}
    unused = sorted(set(device_map) - set(canonical.values()))
    if unused:
        raise PlacerError(f"--map renames {', '.join(unused)}, which the placement does not use "
                          f"(its devices: {', '.join(placement.devices)}); map one of those")
    rename = {d: device_map.get(c, c) for d, c in canonical.items()}
    devices = list(dict.fromkeys(rename[d] for d in placement.devices))
    _check_mix(devices)
    if check_devices:
        check_on_this_machine(devices)
    nodes = {n: rename[d] for n, d in assignment(graph, placement).items()}
    # Constant weights are no decision: each goes with its first reader, whatever the file says.
    nodes.update(graph.constant_devices(nodes))
    return Placement(devices=devices, nodes=nodes,
                     graph_sha256=graph.sha256 or placement.graph_sha256,
                     measurement=placement.measurement, extra=dict(placement.extra))


def check_on_this_machine(devices: list[str]) -> None:
    """Refuse devices this machine lacks, listing them and saying how to map them with --map."""
    have = cuda_count()
    absent = not_on_this_machine([parse_device(d) for d in devices])
    if absent:
        here = ", ".join(f"cuda:{i}" for i in range(have)) or "no GPU"
        target = "cuda:0" if have else ("cpu:0" if any(d.startswith("cpu:") for d in devices) else "cpu")
        example = " ".join(f"--map {d}={target}" for d in absent)
        pronoun = "it" if len(absent) == 1 else "them"
        raise PlacerError(f"the placement uses {', '.join(absent)}, which this machine does not have "
                          f"({here} here); map {pronoun} to devices it has, e.g. {example}")


def _check_mix(devices: list[str]) -> None:
    """The plain CPU and virtual CPU devices cannot be mixed (as `parse_devices` rules)."""
    if mixes_cpu_with_virtual_cpus([parse_device(d) for d in devices]):
        raise PlacerError("the placement mixes 'cpu' with virtual CPU devices 'cpu:K'; "
                          "map one onto the other, e.g. --map cpu=cpu:0")


def _few(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
