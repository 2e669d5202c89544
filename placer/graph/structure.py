"""Structural facts about an ONNX graph: stable node names, outer-scope reads of subgraphs, and a
deterministic topological order. Pure functions over protos; nothing here changes a model."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

import onnx

from placer.errors import PlacerError

# Domains whose ops the ONNX standard defines; anything else is a custom op.
STANDARD_DOMAINS = frozenset({"", "ai.onnx"})


def canonical_domain(domain: str) -> str:
    """'' for the standard ONNX domain however a file spells it ('' or 'ai.onnx'); others as they are."""
    return "" if domain in STANDARD_DOMAINS else domain

# Ops whose attributes hold subgraphs; they stay single opaque vertices.
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})
# Ops whose value is not a function of their inputs: never folded into a constant.
RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                        "Multinomial", "Bernoulli"})


def node_names(nodes: Sequence[onnx.NodeProto]) -> list[str]:
    """Unique names for `nodes`, in file order: a file's name is kept, a nameless node becomes
    ``<op_type>_<k>`` (k counts that op type in file order), a repeated name gets ``_<k>``.

    Names already in the file are never taken by a generated one, so writing the result back
    into the file and naming again gives the same names (a placed model keeps its names)."""
    taken = {n.name for n in nodes if n.name}
    seen: set[str] = set()
    counters: dict[str, int] = {}
    names: list[str] = []

    def fresh(stem: str) -> str:
        while True:
            k = counters.get(stem, 0)
            counters[stem] = k + 1
            candidate = f"{stem}_{k}"
            if candidate not in taken and candidate not in seen:
                return candidate

    for node in nodes:
        if node.name and node.name not in seen:
            name = node.name
        else:
            name = fresh(node.name or node.op_type or "node")
        seen.add(name)
        names.append(name)
    return names


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The subgraphs held in a node's attributes (If branches, Loop/Scan bodies)."""
    result: list[onnx.GraphProto] = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            result.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            result.extend(attr.graphs)
    return result


def nested_nodes(node: onnx.NodeProto) -> Iterable[onnx.NodeProto]:
    """Every node of `node`'s subgraphs, at any depth (what a control-flow node runs)."""
    for graph in subgraphs(node):
        for inner in graph.node:
            yield inner
            yield from nested_nodes(inner)


def deterministic(node: onnx.NodeProto) -> bool:
    """Whether the node's outputs are a function of its inputs: no random op in it or in its
    subgraphs at any depth (a control-flow node with constant inputs may still draw)."""
    return node.op_type not in RANDOM_OPS and not any(n.op_type in RANDOM_OPS for n in nested_nodes(node))


def outer_scope_reads(node: onnx.NodeProto) -> list[str]:
    """Tensors a node's subgraphs read from the enclosing graph, in first-use order.

    They are real inputs of the node: its producer must run first and the value must reach
    the node's device, although they are not listed in `node.input`."""
    reads: dict[str, None] = {}
    for graph in subgraphs(node):
        _collect_free_names(graph, set(), reads)
    return list(reads)


def _collect_free_names(graph: onnx.GraphProto, outer_defined: set[str], reads: dict[str, None]) -> None:
    defined = set(outer_defined)
    defined.update(i.name for i in graph.input)
    defined.update(t.name for t in graph.initializer)
    defined.update(t.values.name for t in graph.sparse_initializer)
    for node in graph.node:
        for name in node.input:
            if name and name not in defined:
                reads.setdefault(name, None)
        for sub in subgraphs(node):
            inner: dict[str, None] = {}
            _collect_free_names(sub, defined, inner)
            for name in inner:
                if name not in defined:
                    reads.setdefault(name, None)
        defined.update(o for o in node.output if o)
    for out in graph.output:
        if out.name not in defined:
            reads.setdefault(out.name, None)


def rename_outer_reads(node: onnx.NodeProto, names: dict[str, str]) -> None:
    """Rename, in place, what `node`'s subgraphs read from the enclosing graph (`names`: old -> new);
    a name a subgraph defines itself shadows the outer one and keeps its name."""
    for graph in subgraphs(node):
        _rename_free_names(graph, set(), names)


def _rename_free_names(graph: onnx.GraphProto, outer_defined: set[str], names: dict[str, str]) -> None:
    defined = set(outer_defined) | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined.update(t.values.name for t in graph.sparse_initializer)
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in names and name not in defined:
                node.input[i] = names[name]
        for sub in subgraphs(node):
            _rename_free_names(sub, defined, names)
        defined.update(o for o in node.output if o)
    for out in graph.output:
        if out.name in names and out.name not in defined:
            out.name = names[out.name]


def node_inputs(node: onnx.NodeProto) -> tuple[str, ...]:
    """A node's inputs as placer runs it: the listed ones (with '' for omitted ones), then the
    tensors its subgraphs read from the enclosing graph that it does not list. A control-flow
    kernel receives the outer-scope values in that order, like any input."""
    listed = set(node.input)
    return (*node.input, *(t for t in outer_scope_reads(node) if t not in listed))


def node_reads(node: onnx.NodeProto) -> list[str]:
    """Every tensor a node needs: its listed inputs, then its subgraphs' outer-scope reads."""
    listed = [n for n in node.input if n]
    return list(dict.fromkeys(listed + outer_scope_reads(node)))


def topological_order(nodes: Sequence[onnx.NodeProto], available: Iterable[str]) -> list[int]:
    """Indices of `nodes` in a deterministic topological order: file order when the file is
    already sorted, otherwise Kahn's algorithm that always takes the earliest ready node.

    `available` are the tensors that exist before any node runs (graph inputs, initializers).
    A graph with a cycle or a read of a tensor nothing defines is a `PlacerError`."""
    known = set(available)
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for out in node.output:
            if out:
                producer[out] = i
    reads = [node_reads(n) for n in nodes]

    undefined = sorted({t for r in reads for t in r if t not in known and t not in producer})
    if undefined:
        shown = ", ".join(undefined[:5]) + (" ..." if len(undefined) > 5 else "")
        raise PlacerError(f"the model reads tensors that no node, input or initializer defines: {shown}; "
                          "the file is incomplete or corrupt, export it again")

    deps = [sorted({producer[t] for t in r if t not in known and t in producer}) for r in reads]
    if all(d < i for i, ds in enumerate(deps) for d in ds):
        return list(range(len(nodes)))

    users: list[list[int]] = [[] for _ in nodes]
    missing = [len(ds) for ds in deps]
    for i, ds in enumerate(deps):
        for d in ds:
            users[d].append(i)
    ready = [i for i, m in enumerate(missing) if m == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        stuck = [nodes[i].name or nodes[i].op_type for i, m in enumerate(missing) if m > 0]
        raise PlacerError(f"the model's graph has a cycle through {len(stuck)} nodes "
                          f"(e.g. {', '.join(stuck[:3])}); ONNX graphs must be acyclic, export it again")
    return order
