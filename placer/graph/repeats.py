"""Repeated blocks: the runs of identical layers a large model is built of (a transformer's decoder
layers), found from the graph's structure alone, so that a search can work on a few of them.

Nodes are compared by a signature (op type, domain, attributes, output shapes and dtypes, and the
shapes of the weights they read), in the graph's topological order. A run of blocks is the longest
stretch of that order that repeats with one period, every block wired as the one before it:

- a block's node reads a tensor of its own block at the same place as in the block before it, or of
  the block just before at the same place (the chain from layer to layer);
- or a tensor from outside the run: the same tensor for every block (a mask, a rotary table), or
  a weight of its own of the same shape (each layer's weights);
- nothing after the run reads a block's tensor except the last block's (graph outputs aside).

The first block reads from outside where the others read the block before them. A graph with no
run of at least `MIN_BLOCKS` such blocks has none (`find_repeats` returns None).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import onnx

from placer.graph.opgraph import OpGraph, OpNode

MIN_BLOCKS = 3       # fewer repeats are not worth reducing
MIN_PERIOD = 4       # nodes in a block: a shorter period is a run of like ops, not of layers
CANDIDATE_PERIODS = 16   # the most common distances between like nodes tried as periods


@dataclass(frozen=True)
class Repeats:
    """The graph's node names split into what comes before the run, the run's blocks (each in the
    same order, so that position i of every block is the same op) and what comes after."""

    prefix: tuple[str, ...]
    blocks: tuple[tuple[str, ...], ...]
    suffix: tuple[str, ...]

    @property
    def period(self) -> int:
        return len(self.blocks[0])


def find_repeats(graph: OpGraph, min_blocks: int = MIN_BLOCKS) -> Repeats | None:
    """The longest run of at least `min_blocks` identically wired blocks of `graph`, or None."""
    names = list(graph.nodes)
    ids: dict[tuple, int] = {}
    sig = np.asarray([ids.setdefault(_signature(graph, graph.nodes[n]), len(ids)) for n in names], dtype=np.int64)
    best: tuple[int, int, int] | None = None   # (covered nodes, -period, start)
    for period in _candidate_periods(sig):
        start, blocks = _longest_run(sig, period)
        while blocks >= min_blocks and not _wired_alike(graph, names, start, period, blocks):
            blocks -= 1   # the last block may be wired to what follows (a final norm reads it)
        if blocks >= min_blocks and (best is None or (blocks * period, -period) > best[:2]):
            best = (blocks * period, -period, start)
    if best is None:
        return None
    covered, period, start = best[0], -best[1], best[2]
    blocks = tuple(tuple(names[start + j * period:start + (j + 1) * period]) for j in range(covered // period))
    return Repeats(tuple(names[:start]), blocks, tuple(names[start + covered:]))


def _signature(graph: OpGraph, node: OpNode) -> tuple:
    attributes = tuple(_attribute_bytes(a) for a in node.proto.attribute)
    weights = tuple((graph.initializers[t].shape, graph.initializers[t].dtype) if t in graph.initializers else None
                    for t in node.inputs)
    outputs = tuple((i.shape, i.dtype) for i in node.output_info)
    return node.op_type, node.domain, attributes, weights, outputs


def _attribute_bytes(attribute: onnx.AttributeProto) -> bytes:
    """An attribute's value, without the names that differ between layers (a Constant's tensor
    name, a subgraph's tensor names: a subgraph counts by its node types)."""
    if attribute.type == onnx.AttributeProto.TENSOR and attribute.t.name:
        attribute = copy_of(attribute)
        attribute.t.name = ""
    elif attribute.type == onnx.AttributeProto.GRAPH:
        return attribute.name.encode() + b":" + ",".join(n.op_type for n in attribute.g.node).encode()
    return attribute.SerializeToString()


def copy_of(attribute: onnx.AttributeProto) -> onnx.AttributeProto:
    copied = onnx.AttributeProto()
    copied.CopyFrom(attribute)
    return copied


def _candidate_periods(sig: np.ndarray) -> list[int]:
    """The commonest distances between consecutive nodes of one signature (a layer's length)."""
    positions: dict[int, list[int]] = {}
    for i, s in enumerate(sig.tolist()):
        positions.setdefault(s, []).append(i)
    gaps = Counter(int(g) for p in positions.values() if len(p) >= MIN_BLOCKS for g in np.diff(p) if g >= MIN_PERIOD)
    return [g for g, _ in gaps.most_common(CANDIDATE_PERIODS)]


def _longest_run(sig: np.ndarray, period: int) -> tuple[int, int]:
    """The start and block count of the longest stretch of `sig` repeating with `period`."""
    if len(sig) < 2 * period:
        return 0, 0
    same = np.concatenate([[False], sig[:-period] == sig[period:], [False]])
    edges = np.flatnonzero(np.diff(same.astype(np.int8)))
    starts, ends = edges[::2], edges[1::2]   # runs [start, end) of positions i with sig[i] == sig[i + period]
    k = int(np.argmax(ends - starts))
    length = int(ends[k] - starts[k])
    return int(starts[k]), (length + period) // period


def _wired_alike(graph: OpGraph, names: list[str], start: int, period: int, blocks: int) -> bool:
    """Whether the `blocks` blocks from `start` read as the rule above says, and nothing after the
    run reads a block's tensor but the last block's."""
    place: dict[str, tuple[int, int, int]] = {}   # tensor -> (block, position, output slot)
    for j in range(blocks):
        for i in range(period):
            for slot, t in enumerate(graph.nodes[names[start + j * period + i]].outputs):
                if t:
                    place[t] = (j, i, slot)
    reads: list[tuple] | None = None
    for j in range(blocks):
        wiring = []
        for i in range(period):
            for t in graph.nodes[names[start + j * period + i]].inputs:
                where = place.get(t)
                if where is not None:
                    if where[0] not in (j, j - 1):
                        return False
                    wiring.append(("own" if where[0] == j else "before", where[1], where[2]))
                elif t in graph.initializers:
                    wiring.append(("weight",))
                else:
                    wiring.append(("outside", t))
        if j >= 2 and wiring != reads:
            return False
        if j == 1 and not _first_reads_like(first, wiring):
            return False
        if j == 0:
            first = wiring
        reads = wiring
    last = blocks - 1
    after = names[start + blocks * period:]
    return all(place.get(t, (last,))[0] == last for n in after for t in graph.nodes[n].inputs)


def _first_reads_like(first: list[tuple], second: list[tuple]) -> bool:
    """The first block reads as the second, but from outside where the second reads the block before."""
    return len(first) == len(second) and all(
        a == b or (b[0] == "before" and a[0] in ("outside", "weight")) for a, b in zip(first, second))
