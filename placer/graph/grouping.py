"""Grouping: reduce a graph's nodes to a few co-located groups that a policy can place.

Two passes, both deterministic:

1. Co-location (the heuristics of Mirhoseini et al. 2017): shape and constant-only subgraphs join
   their consumer; a node whose output only one node reads joins that node. Weights are not
   vertices of an `OpGraph`, so a parameter always travels with the op that reads it. Unlike the
   paper, a merge is refused when it would make a group heavier than a balanced share of the
   graph (total cost / target groups): on a plain chain the "only consumer" rule would otherwise
   leave a single group and nothing to place.
2. Partitioning of the co-located groups into the target number, balancing cost and cutting few
   bytes. `partition` (the default) contracts the lightest adjacent pair, heaviest edge first on
   ties, until the target is reached, and hands graphs of 2000+ co-located groups to METIS
   k-way; `metis` always uses METIS; `topo` cuts contiguous slices of the topological order.
   `colocate` stops after pass 1; `nodes` keeps one group per node.

A group's nodes always go to the same device: `Grouping.expand` turns one device per group into
a node-level `Placement`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Sequence

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph, OpNode
from placer.placement import Placement

METHODS = ("partition", "metis", "topo", "colocate", "nodes")
# Ops whose output depends only on shapes or constants, never on the data flowing through.
_SHAPE_OPS = {"Shape", "Size", "Constant", "ConstantOfShape", "EyeLike", "Range"}
# Cost a node adds beyond its FLOPs: a fixed overhead worth this many FLOPs, plus one per byte.
_NODE_OVERHEAD = 1e4
_MAX_METIS_WEIGHT = 1 << 24
_METIS_MIN_VERTICES = 2000  # below this, greedy contraction (exact count, no METIS quirks)


@dataclass
class Grouping:
    """Groups of node names (in topological order of their first node) and each node's group."""

    groups: list[list[str]]
    node_group: dict[str, int]
    method: str
    # Constant weights (`OpGraph.constants`) -> the node whose device they take: not in any group.
    followers: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.groups)

    def expand(self, group_devices: Sequence[int | str], devices: Sequence[str],
               graph_sha256: str | None = None) -> Placement:
        """A `Placement` putting every node of group g on `group_devices[g]` (an index or a name)."""
        if len(group_devices) != len(self.groups):
            raise ValueError(f"need one device per group ({len(self.groups)}), got {len(group_devices)}")
        devs = [d if isinstance(d, str) else devices[int(d)] for d in group_devices]
        nodes = {n: devs[g] for g, members in enumerate(self.groups) for n in members}
        nodes.update({c: nodes[leader] for c, leader in self.followers.items()})
        return Placement(devices=list(devices), nodes=nodes, graph_sha256=graph_sha256)

    def node_assignment(self, group_devices: Sequence[int], node_order: Sequence[str]) -> list[int]:
        """Device index of each node of `node_order` for a device index per group (no `Placement` built)."""
        return [int(group_devices[self.node_group[n]]) for n in node_order]

    def signature(self) -> str:
        """A short hash of the groups, to tell whether a checkpoint was trained on these."""
        h = hashlib.sha256()
        for members in self.groups:
            h.update("\0".join(members).encode() + b"\1")
        return h.hexdigest()[:16]


def align(graph: OpGraph, grouping: Grouping, node_devices: dict[str, str], limit: int | None = None) -> Grouping:
    """Split every group of `grouping` by the device `node_devices` gives its nodes, so that a
    node-level placement (a baseline placer's) is exactly one device per group of the result.
    Without this, a group straddling the baseline's cut must move whole, and the policy cannot
    even represent the placement it should beat (Inception-v3, 40 groups on two devices: m-SCT
    at 91.0 ms simulated, its best projection on the groups 100.1 ms).

    Where that makes more than `limit` groups, neighbouring parts on the same device are merged
    back down to `limit` (never two devices' parts): on deep graphs the projection of a pipeline
    onto unaligned groups was 1.2x slower than the pipeline itself (Llama-2-7B on 8 H100s)."""
    parts: dict[tuple[int, str], list[str]] = {}
    for name in graph.nodes:
        parts.setdefault((grouping.node_group[name], node_devices[name]), []).append(name)
    groups = list(parts.values())
    if limit is not None and len(groups) > limit:
        cost = {n: node_cost(node) for n, node in graph.nodes.items()}
        groups = _contract(graph, groups, cost, limit, labels=[device for _, device in parts])
    return _finish(graph, groups, f"{grouping.method}+aligned")


def default_group_count(n_nodes: int, n_devices: int, n_colocated: int = 0) -> int:
    """As many groups as the co-location heuristics leave (what the paper placed), at least 20 per
    device and at most 256 (as the published successors used), never more than the nodes.

    Following the co-location groups matters on large graphs: nmt (1,953 ops, 320 co-location
    groups) on two devices, profiled simulator, 8000 samples, seed 0, greedy placement over the
    best baseline with 40 / 80 / 160 / 256 groups: 0.976 / 0.907 / 0.895 / 0.881 (random search
    of the same groups over the greedy placement: 1.03 / 1.06 / 1.11 / 1.15). On graphs whose
    co-location groups are few (Inception-v3: 16) the floor of 20 per device applies, as before.
    """
    return max(1, min(256, max(20 * n_devices, n_colocated), n_nodes))


def node_cost(node: OpNode) -> float:
    """What a group's balance is measured in: FLOPs plus bytes written plus a per-op overhead."""
    return max(node.flops, 0.0) + node.output_bytes + _NODE_OVERHEAD


def group_graph(graph: OpGraph, n_groups: int | None = None, n_devices: int = 2,
                method: str = "partition") -> Grouping:
    """Group `graph`'s nodes into at most `n_groups` groups (default: `default_group_count`)."""
    if method not in METHODS:
        raise PlacerError(f"unknown grouping method {method!r}; use one of {', '.join(METHODS)}")
    names = list(graph.nodes)
    if not names:
        raise PlacerError(f"{graph.source or 'the graph'} has no nodes to place")
    if n_groups is not None and n_groups < 1:
        raise PlacerError(f"--groups must be at least 1, not {n_groups}")
    if method == "nodes":
        return _finish(graph, [[n] for n in names], method)

    cost = {n: node_cost(node) for n, node in graph.nodes.items()}
    target = min(n_groups or default_group_count(len(names), n_devices, len(colocate(graph, cost=cost))),
                 len(names))
    colocated = colocate(graph, cap=sum(cost.values()) / target, cost=cost)
    if method == "colocate" or len(colocated) <= target:
        return _finish(graph, colocated, method)
    if method == "topo":
        return _finish(graph, _topo_slices(colocated, cost, target), method)
    if method == "partition" and len(colocated) < _METIS_MIN_VERTICES:
        # METIS fails ("too many parts") when the parts are nearly as many as the vertices, and
        # leaves parts empty on small graphs of uneven weights; greedy contraction reaches the
        # target exactly and is fast enough at this size.
        return _finish(graph, _contract(graph, colocated, cost, target), method)
    return _finish(graph, _metis(graph, colocated, cost, target), method)


def colocate(graph: OpGraph, cap: float = float("inf"), cost: dict[str, float] | None = None) -> list[list[str]]:
    """The co-location heuristics: groups of nodes that should share a device, each under `cap`."""
    names = list(graph.nodes)
    cost = cost or {n: node_cost(node) for n, node in graph.nodes.items()}
    parent = {n: n for n in names}
    weight = dict(cost)

    def find(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    def union(a: str, b: str, force: bool = False) -> None:
        ra, rb = find(a), find(b)
        if ra == rb or (not force and weight[ra] + weight[rb] > cap):
            return
        # The root is the earlier node, so results never depend on merge order details.
        ra, rb = sorted((ra, rb), key=position.__getitem__)
        parent[rb] = ra
        weight[ra] += weight[rb]

    position = {n: i for i, n in enumerate(names)}
    consumers = graph.consumers
    static = _static_nodes(graph)
    # Shape/constant-only subgraphs join their first consumer, whatever the weight: they are cheap
    # and moving their small outputs around buys nothing. Reverse order folds whole chains.
    for name in reversed(names):
        if name in static:
            readers = [c for t in graph.nodes[name].outputs if t for c in consumers.get(t, [])]
            if readers:
                union(name, min(readers, key=position.__getitem__), force=True)
    # A node whose outputs one node alone reads joins it (as long as the group stays balanced).
    graph_outputs = {t.name for t in graph.outputs}
    for name in names:
        outs = [t for t in graph.nodes[name].outputs if t]
        if any(t in graph_outputs for t in outs):
            continue
        readers = {c for t in outs for c in consumers.get(t, [])}
        if len(readers) == 1:
            union(name, readers.pop())

    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(find(n), []).append(n)
    return list(groups.values())


def _static_nodes(graph: OpGraph) -> set[str]:
    """Nodes computing only from shapes, weights and constants (no data from graph inputs)."""
    static: set[str] = set()
    producer = graph.producer
    for name, node in graph.nodes.items():
        ins = [t for t in node.inputs if t]
        if node.op_type in _SHAPE_OPS or all(t in graph.initializers or producer.get(t) in static for t in ins):
            static.add(name)
    return static


def _topo_slices(groups: list[list[str]], cost: dict[str, float], target: int) -> list[list[str]]:
    """Cut the groups, in topological order of their first node, into `target` runs of equal cost."""
    weights = [sum(cost[n] for n in g) for g in groups]
    total = sum(weights)
    result: list[list[str]] = [[] for _ in range(target)]
    acc = 0.0
    for g, w in zip(groups, weights):
        # The slice a group falls in is where its cost midpoint lies.
        k = min(target - 1, int((acc + w / 2) / total * target)) if total > 0 else 0
        result[k].extend(g)
        acc += w
    return [r for r in result if r]


def _group_edges(graph: OpGraph, groups: list[list[str]]) -> dict[tuple[int, int], int]:
    """Bytes between each pair (low index, high index) of groups, either direction."""
    of = {n: i for i, g in enumerate(groups) for n in g}
    edges: dict[tuple[int, int], int] = {}
    for u, v, data in graph.dag.edges(data=True):
        a, b = of[u], of[v]
        if a != b:
            key = (min(a, b), max(a, b))
            edges[key] = edges.get(key, 0) + int(data.get("bytes", 0))
    return edges


def _contract(graph: OpGraph, groups: list[list[str]], cost: dict[str, float], target: int,
              labels: list | None = None) -> list[list[str]]:
    """Merge neighbouring groups until `target` remain: always the adjacent pair with the least
    combined cost (balance first), ties broken by the most bytes between them (few bytes cut).
    With `labels` (one per group), only groups of the same label merge: where none of those is
    left, fewer than `target` groups cannot be reached and what remains is returned."""
    members = {i: list(g) for i, g in enumerate(groups)}
    weight = {i: sum(cost[n] for n in g) for i, g in enumerate(groups)}
    label = labels or [None] * len(groups)
    edges = {e: b for e, b in _group_edges(graph, groups).items() if label[e[0]] == label[e[1]]}
    while len(members) > target:
        if edges:
            a, b = min(edges, key=lambda e: (weight[e[0]] + weight[e[1]], -edges[e], e))
        else:  # no edges left between mergeable groups: merge the two lightest of one label
            pair = _lightest_pair(members, weight, label)
            if pair is None:
                break
            a, b = pair
        members[a].extend(members.pop(b))
        weight[a] += weight.pop(b)
        merged: dict[tuple[int, int], int] = {}
        for (x, y), nbytes in edges.items():
            x, y = (a if x == b else x), (a if y == b else y)
            if x != y:
                key = (min(x, y), max(x, y))
                merged[key] = merged.get(key, 0) + nbytes
        edges = merged
    return list(members.values())


def _lightest_pair(members: dict[int, list[str]], weight: dict[int, float], label: list) -> tuple[int, int] | None:
    """The two lightest groups that share a label (lowest index first), None where no two do."""
    by_label: dict = {}
    for i in sorted(members, key=lambda i: (weight[i], i)):
        by_label.setdefault(label[i], []).append(i)
    pairs = [sorted(ids[:2]) for ids in by_label.values() if len(ids) >= 2]
    if not pairs:
        return None
    a, b = min(pairs, key=lambda p: (weight[p[0]] + weight[p[1]], p))
    return a, b


def _metis(graph: OpGraph, groups: list[list[str]], cost: dict[str, float], target: int) -> list[list[str]]:
    """METIS k-way partition of the co-located groups: balanced cost, few bytes cut."""
    import pymetis

    weights = [sum(cost[n] for n in g) for g in groups]
    top = max(weights)
    vweights = [max(1, round(w / top * _MAX_METIS_WEIGHT / len(groups))) for w in weights]
    edges = _group_edges(graph, groups)
    adjacency: list[list[tuple[int, int]]] = [[] for _ in groups]
    top_bytes = max(edges.values(), default=1) or 1
    for (a, b), nbytes in sorted(edges.items()):
        w = max(1, round(nbytes / top_bytes * 1_000_000))
        adjacency[a].append((b, w))
        adjacency[b].append((a, w))
    xadj, adjncy, eweights = [0], [], []
    for row in adjacency:
        for b, w in row:
            adjncy.append(b)
            eweights.append(w)
        xadj.append(len(adjncy))
    if not adjncy:
        # METIS needs at least one edge; with none, balance alone decides.
        return _topo_slices(groups, cost, target)
    result = pymetis.part_graph(target, pymetis.CSRAdjacency(xadj, adjncy), vweights=vweights,
                                eweights=eweights, options=pymetis.Options(seed=0))
    parts: dict[int, list[str]] = {}
    for g, part in zip(groups, result[1]):
        parts.setdefault(int(part), []).extend(g)
    return list(parts.values())


def _finish(graph: OpGraph, groups: list[list[str]], method: str) -> Grouping:
    """Sort nodes within groups and groups by their first node, in the graph's topological order."""
    position = {n: i for i, n in enumerate(graph.nodes)}
    groups = [sorted(g, key=position.__getitem__) for g in groups if g]
    groups.sort(key=lambda g: position[g[0]])
    leaders = graph.constant_devices({n: n for n in graph.nodes})
    return Grouping(groups=groups, node_group={n: i for i, g in enumerate(groups) for n in g}, method=method,
                    followers=leaders)
