"""What the graph policy sees of a graph on a cluster: absolute figures, never scaled by one graph.

The figures of groups, devices and (group, device) pairs, and the mask of pairs that may be chosen,
are `placer.env.absolute_features`' (the padded environment observes the same ones). Here they are
put together for the network, with the edges of the group DAG: both directions of every pair of
groups that exchange tensors, with the log bytes crossing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placer.costmodel.protocol import CostModel
from placer.env.absolute_features import (LOG_WORK, allowed_devices, bytes_between, device_features, group_memory,
                                          group_rows, group_times, log_scaled, pair_features)
from placer.graph.grouping import Grouping, group_graph
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster

MAX_GROUPS = 256   # what the grouping coarsens every graph to at most (Inception-v3 places in well under 2 s)
EDGE_FEATURES = 2


@dataclass
class GraphFeatures:
    """The policy's inputs for one graph on one cluster (numpy; `to_torch` in the model)."""

    grouping: Grouping
    devices: list[str]
    groups: np.ndarray        # (G, GROUP_FEATURES) float32
    edge_index: np.ndarray    # (2, E) int64, both directions
    edge_attr: np.ndarray     # (E, EDGE_FEATURES) float32
    edge_bytes: np.ndarray    # (E,) float64: bytes crossing each directed edge's pair, for the placement state
    device: np.ndarray        # (D, DEVICE_FEATURES) float32
    pair: np.ndarray          # (G, D, PAIR_FEATURES) float32
    group_time: np.ndarray    # (G, D) float64 seconds (inf: cannot run there)
    mask: np.ndarray          # (G, D) bool: the devices each group may go to

    @property
    def n_groups(self) -> int:
        return len(self.grouping)


def policy_grouping(graph: OpGraph, n_devices: int) -> Grouping:
    """The groups the policy places: `group_graph`'s default, at most `MAX_GROUPS`."""
    grouping = group_graph(graph, None, n_devices)
    if len(grouping) > MAX_GROUPS:
        grouping = group_graph(graph, MAX_GROUPS, n_devices)
    return grouping


def graph_features(graph: OpGraph, cluster: Cluster, cost: CostModel | None = None,
                   grouping: Grouping | None = None) -> GraphFeatures:
    """The policy's view of `graph` on `cluster` with `cost` (default: the cluster's roofline model),
    its groups `grouping` (default: `group_graph` with at most `MAX_GROUPS`)."""
    if cost is None:
        from placer.costmodel.roofline import RooflineCostModel

        cost = RooflineCostModel(cluster, graph)
    devices = cluster.device_names
    if grouping is None:
        grouping = policy_grouping(graph, len(devices))

    between = bytes_between(graph, grouping)
    pairs = sorted(between)
    edge_index = np.asarray([[a for a, _ in pairs] + [b for _, b in pairs],
                             [b for _, b in pairs] + [a for a, _ in pairs]], dtype=np.int64).reshape(2, -1)
    crossing = np.asarray([between[p] for p in pairs] * 2, dtype=np.float64)
    direction = np.asarray([1.0] * len(pairs) + [-1.0] * len(pairs))   # producer to consumer, or back
    edge_attr = (np.stack([log_scaled(crossing, LOG_WORK), direction], axis=1) if pairs
                 else np.zeros((0, EDGE_FEATURES)))

    times = group_times(graph, grouping, cost, devices)
    capacity = np.asarray([d.model.memory_bytes for d in cluster.devices], dtype=np.float64)
    return GraphFeatures(grouping=grouping, devices=devices, groups=group_rows(graph, grouping),
                         edge_index=edge_index, edge_attr=edge_attr.astype(np.float32), edge_bytes=crossing,
                         device=device_features(cluster), pair=pair_features(times), group_time=times,
                         mask=allowed_devices(times, group_memory(graph, grouping), capacity))
