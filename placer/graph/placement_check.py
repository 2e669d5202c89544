"""The one check of a placement against a graph: every node placed, every device known.

    assignment(graph, placement, ["cpu:0", "cpu:1"]) -> {node: device} for every node of `graph`

Every engine, the simulator and the annotation passes check a placement with it; a check that
needs more (the graph's hash, node names the graph lacks, devices of this machine) adds it on top.
"""

from __future__ import annotations

from collections.abc import Iterable

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement

# What to do about a node left out, as a message says it after the semicolon.
LISTS_NODE_NAMES = "`placer inspect --json` lists the node names"


def unplaced(graph: OpGraph, placement: Placement) -> list[str]:
    """The nodes of `graph` (in its order) that `placement` gives no device."""
    return [n for n in graph.nodes if n not in placement.nodes]


def assignment(graph: OpGraph, placement: Placement, device_names: Iterable[str] | None = None,
               *, remedy: str = LISTS_NODE_NAMES) -> dict[str, str]:
    """Node -> device for every node of `graph`, in graph order.

    A node `placement` leaves out is a `PlacerError` (its message ends with `remedy`); so is, when
    `device_names` is given, a device of a graph node that is not among them."""
    missing = unplaced(graph, placement)
    if missing:
        raise PlacerError(f"the placement does not place {len(missing)} node(s) of the graph, e.g. "
                          f"{missing[:3]}; {remedy}")
    nodes = {n: placement.nodes[n] for n in graph.nodes}
    if device_names is not None:
        known = list(device_names)
        unknown = sorted(set(nodes.values()) - set(known))
        if unknown:
            raise PlacerError(f"the placement uses device(s) {unknown} that are not among {known}; "
                              "add them to --devices or map them with --map")
    return nodes
