"""What the policy sees of each group: op-type histogram, output shapes and bytes, FLOPs,
parameter bytes, size, and the bytes flowing between groups. All scaled into [0, 1]."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placer.graph.grouping import Grouping
from placer.graph.opgraph import OpGraph

SHAPE_DIMS = 4  # the largest output's last dims, padded on the left


@dataclass
class GroupFeatures:
    """Per-group feature rows and the group-to-group adjacency (bytes sent from row to column)."""

    features: np.ndarray    # (groups, n_features) float32 in [0, 1]
    adjacency: np.ndarray   # (groups, groups) float32 in [0, 1], log-scaled bytes
    op_types: list[str]     # the histogram's vocabulary, in column order


def _scaled_log(values: np.ndarray) -> np.ndarray:
    """log1p, then divided by the largest value so every column lies in [0, 1]."""
    logged = np.log1p(np.maximum(values, 0.0))
    top = logged.max() if logged.size else 0.0
    return logged / top if top > 0 else logged


@dataclass
class _GroupFigures:
    """The raw figures both views scale: op-type counts, scalars, shapes and bytes between groups."""

    op_types: list[str]
    hist: np.ndarray        # (groups, op types): the share of each op type
    scalars: np.ndarray     # (groups, 4): output bytes, FLOPs, param bytes, nodes
    shapes: np.ndarray      # (groups, SHAPE_DIMS): the largest output's last dims
    adjacency: np.ndarray   # (groups, groups): bytes sent from row to column


def _group_figures(graph: OpGraph, grouping: Grouping) -> _GroupFigures:
    op_types = sorted({n.op_type for n in graph.nodes.values()})
    column = {t: i for i, t in enumerate(op_types)}
    G = len(grouping.groups)
    hist = np.zeros((G, len(op_types)), dtype=np.float64)
    scalars = np.zeros((G, 4), dtype=np.float64)          # output bytes, FLOPs, param bytes, nodes
    shapes = np.zeros((G, SHAPE_DIMS), dtype=np.float64)
    for g, members in enumerate(grouping.groups):
        largest: tuple[int, ...] = ()
        largest_bytes = -1
        for name in members:
            node = graph.nodes[name]
            hist[g, column[node.op_type]] += 1
            scalars[g] += (node.output_bytes, node.flops, node.param_bytes, 1)
            for info in node.output_info:
                if info.nbytes > largest_bytes:
                    largest, largest_bytes = info.shape, info.nbytes
        tail = list(largest[-SHAPE_DIMS:])
        shapes[g, SHAPE_DIMS - len(tail):] = tail
    hist /= np.maximum(scalars[:, 3:4], 1)
    adjacency = np.zeros((G, G), dtype=np.float64)
    for u, v, data in graph.dag.edges(data=True):
        a, b = grouping.node_group[u], grouping.node_group[v]
        if a != b:
            adjacency[a, b] += data.get("bytes", 0)
    return _GroupFigures(op_types, hist, scalars, shapes, adjacency)


def group_features(graph: OpGraph, grouping: Grouping) -> GroupFeatures:
    """The features of every group of `grouping` over `graph`, scaled by the graph's own maxima."""
    f = _group_figures(graph, grouping)
    columns = [f.hist] + [_scaled_log(f.scalars[:, k:k + 1]) for k in range(4)] + [_scaled_log(f.shapes)]
    return GroupFeatures(np.concatenate(columns, axis=1).astype(np.float32),
                         _scaled_log(f.adjacency).astype(np.float32), f.op_types)


# Fixed scales of the absolute view: log1p of a figure over log1p of this reaches 1 (clipped above).
ABSOLUTE_SCALE = 1e13      # bytes and FLOPs of one group (~10 TB, ~10 TFLOP)
ABSOLUTE_FEATURES = 4 + SHAPE_DIMS


def _absolute_log(values: np.ndarray, scale: float = ABSOLUTE_SCALE) -> np.ndarray:
    return np.clip(np.log1p(np.maximum(values, 0.0)) / np.log1p(scale), 0.0, 1.0)


def absolute_group_features(graph: OpGraph, grouping: Grouping) -> GroupFeatures:
    """The same figures on fixed scales, never one graph's maxima, and without the op-type
    histogram (its columns are the graph's own vocabulary): `ABSOLUTE_FEATURES` columns for every
    graph, so one observation space holds any of them."""
    f = _group_figures(graph, grouping)
    features = np.concatenate([_absolute_log(f.scalars), _absolute_log(f.shapes)], axis=1)
    return GroupFeatures(features.astype(np.float32), _absolute_log(f.adjacency).astype(np.float32), [])
