"""`PlacementEnv`: device placement as a Gymnasium environment.

An episode places every group of a `Grouping` on a device. In the default one-shot mode the
action is one device per group (MultiDiscrete) and the episode ends after one step; in
sequential mode each step places the next group (Discrete) and the last one is measured.
The reward is -sqrt(step time in seconds); a failed placement counts as if it took
`failure_time` seconds (100 s, as the published implementation did). `info` carries the full
`Measurement` (as a dict) and the `Placement`.
"""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from placer.devices import Device
from placer.env.features import group_features
from placer.errors import PlacerError
from placer.graph.grouping import Grouping, group_graph
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster, load_cluster
from placer.measure.measurement import Measurement, Measurer

MODES = ("one_shot", "sequential")


class PlacementEnv(gym.Env):
    """Place the groups of `graph` on the measurer's devices; reward = -sqrt(step time).

    `graph` is an `OpGraph`, a path to an ONNX file or a zoo name such as "resnet50.onnx", loaded
    as --graph is: `input_shapes` binds its dynamic dimensions (a dict, or --input-shape's
    "NAME=1x3x224x224" strings) and `inputs` are its sample inputs (a dict of arrays or an .npz
    path, as --inputs), which feed every step measured. Without a `measurer`, placements are
    simulated with the analytic cost model on `devices` (default: the machine's devices), or, with
    `cluster` (a catalogue name, a TOML file or a `Cluster`), with the cluster's roofline costs on
    its devices, their memory capacities as caps.
    Observation: ``features`` (groups x features), ``adjacency`` (groups x groups) and
    ``placed`` (the device of each group so far; the number of devices marks "not yet").
    """

    metadata = {"render_modes": []}

    def __init__(self, graph: OpGraph | str | os.PathLike, measurer: Measurer | None = None,
                 devices: Sequence[Device | str] | None = None, grouping: Grouping | None = None,
                 n_groups: int | None = None, grouping_method: str = "partition", mode: str = "one_shot",
                 failure_time: float = 100.0, input_shapes: dict[str, tuple[int, ...]] | Sequence[str] | None = None,
                 cluster: Cluster | str | os.PathLike | None = None,
                 inputs: dict[str, np.ndarray] | str | os.PathLike | None = None) -> None:
        if mode not in MODES:
            raise PlacerError(f"unknown environment mode {mode!r}; use one of {', '.join(MODES)}")
        if isinstance(graph, (str, os.PathLike)):
            from placer.kernels.loading import load_graph

            graph = load_graph(graph, input_shapes, inputs)
        elif input_shapes or inputs is not None:
            raise PlacerError("input_shapes and inputs apply to a graph loaded here; pass the model's path or zoo "
                              "name, or load the OpGraph with placer.kernels.loading.load_graph(path, input_shapes, inputs)")
        if cluster is not None:
            measurer = _cluster_measurer(graph, cluster, measurer, devices)
        if measurer is None:
            from placer.devices import default_devices
            from placer.costmodel.simulator import SimulatedMeasurer

            measurer = SimulatedMeasurer(graph, devices if devices is not None else default_devices())
        self.graph = graph
        self.measurer = measurer
        self.devices = list(measurer.devices)
        self.grouping = grouping or group_graph(graph, n_groups, len(self.devices), grouping_method)
        self.mode = mode
        self.failure_time = float(failure_time)

        feats = group_features(graph, self.grouping)
        self.op_types = feats.op_types
        G, D = len(self.grouping), len(self.devices)
        self.n_groups, self.n_devices = G, D
        self._features, self._adjacency = feats.features, feats.adjacency
        self.observation_space = spaces.Dict({
            "features": spaces.Box(0.0, 1.0, feats.features.shape, np.float32),
            "adjacency": spaces.Box(0.0, 1.0, feats.adjacency.shape, np.float32),
            "placed": spaces.MultiDiscrete(np.full(G, D + 1, dtype=np.int64)),
        })
        self.action_space = (spaces.MultiDiscrete(np.full(G, D, dtype=np.int64)) if mode == "one_shot"
                             else spaces.Discrete(D))
        self._placed = np.full(G, D, dtype=np.int64)
        self._position = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"features": self._features.copy(), "adjacency": self._adjacency.copy(),
                "placed": self._placed.copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start a new placement: nothing placed yet."""
        super().reset(seed=seed)
        self._placed = np.full(self.n_groups, self.n_devices, dtype=np.int64)
        self._position = 0
        return self._obs(), {}

    def step(self, action):
        """Place all groups (one-shot) or the next one (sequential); measure once all are placed."""
        if self.mode == "one_shot":
            self._placed = np.asarray(action, dtype=np.int64).reshape(self.n_groups).copy()
            self._position = self.n_groups
        else:
            if self._position >= self.n_groups:
                raise RuntimeError("episode is over; call reset() first")
            self._placed[self._position] = int(action)
            self._position += 1
            if self._position < self.n_groups:
                return self._obs(), 0.0, False, False, {}
        if (self._placed < 0).any() or (self._placed >= self.n_devices).any():
            raise ValueError(f"actions must be device indices in [0, {self.n_devices})")
        measurement, placement = self.evaluate(self._placed)
        return self._obs(), self.reward(measurement), True, False, {
            "measurement": measurement.to_dict(), "placement": placement}

    def evaluate(self, group_devices: Sequence[int]):
        """Measure one device index per group: the `Measurement` and the `Placement` measured."""
        placement = self.grouping.expand([int(d) for d in group_devices], self.devices, self.graph.sha256)
        return self.measurer.measure(placement), placement

    def reward(self, measurement: Measurement) -> float:
        """-sqrt(step time in seconds); a failure counts as `failure_time` seconds."""
        ok = measurement.ok and measurement.step_time is not None and math.isfinite(measurement.step_time)
        return -math.sqrt(measurement.step_time if ok else self.failure_time)


def _cluster_measurer(graph: OpGraph, cluster: Cluster | str | os.PathLike, measurer, devices) -> Measurer:
    """The simulated measurer of a described cluster: its devices (memory capacities as caps) and
    its roofline costs. The cluster says which devices and what time, so neither may come twice."""
    from placer.costmodel.roofline import cluster_measurer

    if measurer is not None or devices is not None:
        raise PlacerError("give the environment a cluster, or devices or a measurer, not both: the cluster's devices "
                          "are the devices and its simulated step times the rewards")
    if not isinstance(cluster, Cluster):
        cluster = load_cluster(os.fspath(cluster))
    return cluster_measurer(cluster, graph)
