"""What the environment shows of each group, and of the bytes flowing between groups.

- `group_features`: one graph's own view, scaled by its maxima into [0, 1] (the per-graph seq2seq
  policy reads it): the share of each op type the graph has, output bytes, FLOPs, parameter bytes,
  node count and the largest output's last dims.
- `absolute_group_features`: the padded environment's view, on fixed scales for every graph: the
  graph policy's group features (`absolute_features.group_rows`: a fixed op vocabulary with hashed
  buckets, log FLOPs and bytes, node count, position), then the largest output's last dims.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placer.env.absolute_features import LOG_WORK, OP_VOCABULARY, bytes_between, group_rows, log_scaled
from placer.graph.grouping import Grouping
from placer.graph.opgraph import OpGraph

SHAPE_DIMS = 4  # the largest output's last dims, padded on the left


@dataclass
class GroupFeatures:
    """Per-group feature rows and the group-to-group adjacency (bytes sent from row to column)."""

    features: np.ndarray    # (groups, n_features) float32
    adjacency: np.ndarray   # (groups, groups) float32, log-scaled bytes
    op_types: list[str]     # the op-share columns' vocabulary, in column order (the first columns)


def _scaled_log(values: np.ndarray) -> np.ndarray:
    """log1p, then divided by the largest value so every column lies in [0, 1]."""
    logged = np.log1p(np.maximum(values, 0.0))
    top = logged.max() if logged.size else 0.0
    return logged / top if top > 0 else logged


def _largest_output_shapes(graph: OpGraph, grouping: Grouping) -> np.ndarray:
    """(groups, SHAPE_DIMS): the last dims of each group's largest output, padded on the left with zeros."""
    shapes = np.zeros((len(grouping.groups), SHAPE_DIMS), dtype=np.float64)
    for g, members in enumerate(grouping.groups):
        largest: tuple[int, ...] = ()
        largest_bytes = -1
        for name in members:
            for info in graph.nodes[name].output_info:
                if info.nbytes > largest_bytes:
                    largest, largest_bytes = info.shape, info.nbytes
        tail = list(largest[-SHAPE_DIMS:])
        shapes[g, SHAPE_DIMS - len(tail):] = tail
    return shapes


def _bytes_matrix(graph: OpGraph, grouping: Grouping) -> np.ndarray:
    """(groups, groups): bytes sent from row group to column group."""
    G = len(grouping.groups)
    adjacency = np.zeros((G, G), dtype=np.float64)
    for (a, b), sent in bytes_between(graph, grouping).items():
        adjacency[a, b] = sent
    return adjacency


def group_features(graph: OpGraph, grouping: Grouping) -> GroupFeatures:
    """The features of every group of `grouping` over `graph`, scaled by the graph's own maxima."""
    op_types = sorted({n.op_type for n in graph.nodes.values()})
    column = {t: i for i, t in enumerate(op_types)}
    G = len(grouping.groups)
    hist = np.zeros((G, len(op_types)), dtype=np.float64)
    scalars = np.zeros((G, 4), dtype=np.float64)          # output bytes, FLOPs, param bytes, nodes
    for g, members in enumerate(grouping.groups):
        for name in members:
            node = graph.nodes[name]
            hist[g, column[node.op_type]] += 1
            scalars[g] += (node.output_bytes, node.flops, node.param_bytes, 1)
    hist /= np.maximum(scalars[:, 3:4], 1)
    columns = ([hist] + [_scaled_log(scalars[:, k:k + 1]) for k in range(4)]
               + [_scaled_log(_largest_output_shapes(graph, grouping))])
    return GroupFeatures(np.concatenate(columns, axis=1).astype(np.float32),
                         _scaled_log(_bytes_matrix(graph, grouping)).astype(np.float32), op_types)


def absolute_group_features(graph: OpGraph, grouping: Grouping) -> GroupFeatures:
    """The graph policy's group features, then the largest output's last dims, and the bytes between
    groups, all on fixed scales (never one graph's maxima): the same columns for every graph, so one
    observation space holds any of them, and the first `GROUP_FEATURES` columns are the policy's own."""
    shapes = log_scaled(_largest_output_shapes(graph, grouping), LOG_WORK)
    features = np.concatenate([group_rows(graph, grouping), shapes], axis=1)
    adjacency = log_scaled(_bytes_matrix(graph, grouping), LOG_WORK)
    return GroupFeatures(features.astype(np.float32), adjacency.astype(np.float32), list(OP_VOCABULARY))
