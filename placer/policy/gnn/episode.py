"""One graph on one cluster, ready for the graph policy: its features, its simulator and its yardstick.

The simulator is the batched one (`simulate_batch`, `peaks=False`: only whether a placement fits
matters), over the cluster's devices with their memory capacities as caps. The yardstick is the
best list heuristic's simulated step time (m-ETF, m-SCT, HEFT, the expert and every single device:
`placer.placers.starts.best_start`, which local search also starts from): rewards are step times
divided by it, so that they compare across graphs and clusters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from placer.costmodel.batch_simulator import simulate_batch
from placer.costmodel.protocol import CostModel
from placer.costmodel.simulator import Simulator
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster
from placer.placement import Placement
from placer.placers.base import make_simulator
from placer.policy.gnn.features import GraphFeatures, graph_features
from placer.policy.gnn.tensors import FeatureTensors


@dataclass
class Episode:
    """A graph on a cluster: what the policy reads and what scores its placements."""

    name: str
    graph: OpGraph
    cluster: Cluster
    cost: CostModel
    features: GraphFeatures
    tensors: FeatureTensors
    simulator: Simulator
    node_group: np.ndarray           # each node's group, in graph order
    best_time: float = math.inf      # the best list heuristic's simulated step time (inf: none fits, or not asked)
    best_name: str | None = None
    # the best list heuristic's placement on the groups (each group where most of its work is): a
    # start the policy improves on, beside its placement from nothing; None without a yardstick
    start: np.ndarray | None = None
    best_assign: np.ndarray | None = None   # the best list heuristic's own node-level placement
    # every distinct list heuristic's node-level placement (device index per node), by name
    heuristic_assigns: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def caps(self) -> dict[str, int]:
        return {d.name: d.model.memory_bytes for d in self.cluster.devices}

    def step_times(self, group_assign: np.ndarray) -> np.ndarray:
        """Simulated step time of each row of `group_assign` (N, G) device indices; inf where it fails."""
        rows = np.asarray(group_assign, dtype=np.int64).reshape(-1, self.features.n_groups)[:, self.node_group]
        result = simulate_batch(self.simulator, rows, peaks=False)
        return np.where([f is None for f in result.failure], result.step_time, np.inf)

    def placement(self, group_devices, **info) -> Placement:
        """The node-level `Placement` of one device index per group; `info` recorded under extra["placer"]."""
        placement = self.features.grouping.expand([int(d) for d in group_devices], self.features.devices,
                                                  self.graph.sha256)
        placement.extra = {"placer": {"name": "gnn", **info}}
        return placement

    def starting_points(self) -> list[tuple[str, np.ndarray]]:
        """Distinct (name, group-level placement) starts for the policy's rounds: the best list
        heuristic's (its very placement, the groups being split where it cuts them), then every
        other list heuristic's and METIS's, each group where most of its work is."""
        from placer.errors import PlacerError
        from placer.placers.metis import metis

        starts = [(f"the best heuristic ({self.best_name})", self.start)] if self.start is not None else []
        assigns = dict(self.heuristic_assigns)
        devices = self.cluster.device_names
        try:
            found = metis(self.graph, devices, self.cost, self.caps)
            assigns["metis"] = np.asarray([devices.index(found.nodes[n]) for n in self.graph.nodes])
        except PlacerError:
            pass
        for name, assign in assigns.items():
            row = group_majority(self.graph, self.node_group, self.features.n_groups, len(devices), assign)
            if not any((row == other).all() for _, other in starts):
                starts.append((name, row))
        return starts

    def heuristic_placement(self) -> Placement | None:
        """The best list heuristic's own node-level placement (None without one)."""
        if self.best_assign is None:
            return None
        names = self.cluster.device_names
        return Placement(list(names), {n: names[int(k)] for n, k in zip(self.graph.nodes, self.best_assign)},
                         graph_sha256=self.graph.sha256)


def make_episode(graph: OpGraph, cluster: Cluster, cost: CostModel | None = None, name: str = "",
                 yardstick: bool = True) -> Episode:
    """`graph` on `cluster`, priced by `cost` (default: the cluster's roofline model); with
    `yardstick`, the best list heuristic is found too (a few list schedules, tenths of a second),
    and the policy's groups are split where its placement cuts them (parts on one device merged
    back where that makes more than MAX_GROUPS), so that the chain of rounds from it starts from
    its very placement, not from a projection on the groups that can be far slower (Inception-v3 on the DGX-1: 1.25x)."""
    from placer.graph.grouping import align
    from placer.policy.gnn.features import MAX_GROUPS, policy_grouping

    if cost is None:
        from placer.costmodel.roofline import RooflineCostModel

        cost = RooflineCostModel(cluster, graph)
    devices = cluster.device_names
    caps = {d.name: d.model.memory_bytes for d in cluster.devices}
    simulator = make_simulator(graph, devices, cost, caps)
    start = None
    grouping = policy_grouping(graph, len(devices))
    if yardstick:
        from placer.placers.starts import best_start

        start = best_start(graph, devices, cost, caps, simulator)
        if start.assign is not None:
            grouping = align(graph, grouping, {n: devices[int(k)] for n, k in zip(graph.nodes, start.assign)},
                             limit=MAX_GROUPS)
    features = graph_features(graph, cluster, cost, grouping)
    node_group = np.asarray([features.grouping.node_group[n] for n in graph.nodes], dtype=np.int64)
    start_row = None
    if start is not None and start.assign is not None:
        start_row = group_majority(graph, node_group, features.n_groups, len(devices), start.assign)
        # the mask's memory figure of a group alone (weights plus every output, nothing freed) can
        # exceed a device the heuristic's simulated placement fits on: its devices stay allowed, or
        # no round could reproduce the start (Llama-2-7B on the DGX-1: every round 1.2x slower)
        features.mask[np.arange(features.n_groups), start_row] = True
    episode = Episode(name or graph.source, graph, cluster, cost, features, FeatureTensors.of(features), simulator,
                      node_group)
    if start is not None:
        episode.best_time, episode.best_name, episode.best_assign = start.step_time, start.name, start.assign
        episode.start = start_row
        episode.heuristic_assigns = {label: np.asarray(row) for row, label in start.scored.items()
                                     if not label.startswith("single:")}
    return episode


def group_majority(graph: OpGraph, node_group: np.ndarray, n_groups: int, n_devices: int,
                   node_devices: np.ndarray) -> np.ndarray:
    """(G,) the device holding most of each group's work (`node_cost`) in a node-level assignment."""
    from placer.graph.grouping import node_cost

    work = np.zeros((n_groups, n_devices))
    np.add.at(work, (node_group, np.asarray(node_devices, dtype=np.int64)),
              [node_cost(node) for node in graph.nodes.values()])
    return work.argmax(axis=1)
