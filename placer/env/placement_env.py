"""`PlacementEnv`: device placement as a Gymnasium environment.

An episode places every group of a `Grouping` on a device. In the default one-shot mode the
action is one device per group (MultiDiscrete) and the episode ends after one step; in
sequential mode each step places the next group (Discrete) and the last one is measured.
The reward is -sqrt(step time in seconds); a failed placement counts as if it took
`failure_time` seconds (100 s, as the published implementation did). `info` carries the full
`Measurement` (as a dict) and the `Placement`.

One environment for many problems: built with `max_groups` and `max_devices`, its spaces are
padded to those sizes, so that `reset(options={"graph": ..., "cluster": ...})` can switch the
graph, the cluster or both between episodes (and `gymnasium.vector.SyncVectorEnv` can batch
environments on different problems). The padded observation is, with G groups of D devices in
this episode (G <= max_groups, D <= max_devices):

- ``features`` (max_groups x (GROUP_FEATURES + 4)): the graph policy's group features (each op
  type's share over a fixed vocabulary, unknown ops in hashed buckets; log FLOPs, output, input and
  parameter bytes; log node count; topological position), then the largest output's last 4 dims;
- ``adjacency`` (max_groups x max_groups): log bytes from row group to column group;
- ``group_mask`` (max_groups): 1 for the G real groups;
- ``devices`` (max_devices x DEVICE_FEATURES): the graph policy's device features, from the
  cluster's datasheet figures and routes (zero without a cluster);
- ``device_mask`` (max_devices): 1 for the D real devices;
- ``pair`` (max_groups x max_devices x PAIR_FEATURES): the graph policy's (group, device) features:
  the cost model's log time of the group's ops on the device, that over its fastest device's, and
  whether they run there, when the rewards are simulated; zero otherwise;
- ``pair_mask`` (max_groups x max_devices): 1 where the graph policy may send the group: it runs
  there and its weights and outputs fit the device's memory (every real pair without a cost model);
- ``placed`` (max_groups): the device of each group so far; max_devices marks "not yet" and padding.

The figures are `placer.env.absolute_features`', the graph policy's own, on fixed log scales: they
sit near [-1, 1] but are not clipped, so the boxes are unbounded where a log is.

The action holds max_groups device indices (one-shot) or one (sequential); the entries past G are
ignored, and a group sent to a device past D fails the placement (rewarded as `failure_time`).
"""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from placer.devices import Device
from placer.env.absolute_features import (DEVICE_FEATURES, PAIR_FEATURES, allowed_devices, device_features,
                                          group_memory, group_times, pair_features)
from placer.env.features import absolute_group_features, group_features
from placer.errors import PlacerError
from placer.graph.grouping import Grouping, group_graph
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster, load_cluster
from placer.measure.measurement import Measurement, Measurer

MODES = ("one_shot", "sequential")
RESET_OPTIONS = ("graph", "cluster")


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
    With `max_groups` and `max_devices`, the padded observation of the module's docstring, and
    `reset(options={"graph": ..., "cluster": ...})` switches problems between episodes.
    """

    metadata = {"render_modes": []}

    def __init__(self, graph: OpGraph | str | os.PathLike, measurer: Measurer | None = None,
                 devices: Sequence[Device | str] | None = None, grouping: Grouping | None = None,
                 n_groups: int | None = None, grouping_method: str = "partition", mode: str = "one_shot",
                 failure_time: float = 100.0, input_shapes: dict[str, tuple[int, ...]] | Sequence[str] | None = None,
                 cluster: Cluster | str | os.PathLike | None = None,
                 inputs: dict[str, np.ndarray] | str | os.PathLike | None = None,
                 max_groups: int | None = None, max_devices: int | None = None) -> None:
        if mode not in MODES:
            raise PlacerError(f"unknown environment mode {mode!r}; use one of {', '.join(MODES)}")
        if isinstance(graph, (str, os.PathLike)):
            from placer.kernels.loading import load_graph

            graph = load_graph(graph, input_shapes, inputs)
        elif input_shapes or inputs is not None:
            raise PlacerError("input_shapes and inputs apply to a graph loaded here; pass the model's path or zoo "
                              "name, or load the OpGraph with placer.kernels.loading.load_graph(path, input_shapes, inputs)")
        if (max_groups is None) != (max_devices is None) or any(m is not None and m < 1 for m in (max_groups, max_devices)):
            raise PlacerError("give max_groups and max_devices together, both at least 1 (the padded spaces' sizes), "
                              "or neither")
        self.padded = max_groups is not None
        self.max_groups, self.max_devices = max_groups, max_devices
        # what the measurer of another graph or cluster is made from (a measurer given is for its graph only)
        self._given_measurer = measurer is not None
        self.cluster: Cluster | None = None
        if cluster is not None:
            self.cluster = cluster if isinstance(cluster, Cluster) else load_cluster(os.fspath(cluster))
            measurer = _cluster_measurer(graph, self.cluster, measurer, devices)
        if measurer is None:
            from placer.devices import default_devices
            from placer.costmodel.simulator import SimulatedMeasurer

            self._device_specs = devices if devices is not None else default_devices()
            measurer = SimulatedMeasurer(graph, self._device_specs)
        self.mode = mode
        self.failure_time = float(failure_time)
        self._n_groups_asked, self._grouping_method = n_groups, grouping_method
        self._set_problem(graph, measurer, grouping)

        G, D = (self.max_groups, self.max_devices) if self.padded else (self.n_groups, self.n_devices)
        if self.padded:
            self.observation_space = spaces.Dict({
                # the graph policy's figures, unclipped: group logs >= 0 with no top, device and time logs either sign
                "features": spaces.Box(0.0, np.inf, (G, self._features.shape[1]), np.float32),
                "adjacency": spaces.Box(0.0, np.inf, (G, G), np.float32),
                "group_mask": spaces.MultiBinary(G),
                "devices": spaces.Box(-np.inf, np.inf, (D, DEVICE_FEATURES), np.float32),
                "device_mask": spaces.MultiBinary(D),
                "pair": spaces.Box(-np.inf, np.inf, (G, D, PAIR_FEATURES), np.float32),
                "pair_mask": spaces.MultiBinary((G, D)),
                "placed": spaces.MultiDiscrete(np.full(G, D + 1, dtype=np.int64)),
            })
        else:
            self.observation_space = spaces.Dict({
                "features": spaces.Box(0.0, 1.0, self._features.shape, np.float32),
                "adjacency": spaces.Box(0.0, 1.0, self._adjacency.shape, np.float32),
                "placed": spaces.MultiDiscrete(np.full(G, D + 1, dtype=np.int64)),
            })
        self.action_space = (spaces.MultiDiscrete(np.full(G, D, dtype=np.int64)) if mode == "one_shot"
                             else spaces.Discrete(D))
        self._clear()

    def _set_problem(self, graph: OpGraph, measurer: Measurer, grouping: Grouping | None = None) -> None:
        """Make `graph` on the measurer's devices this environment's problem: its groups and features."""
        devices = list(measurer.devices)
        if self.padded and len(devices) > self.max_devices:
            raise PlacerError(f"{len(devices)} devices do not fit this environment's max_devices={self.max_devices}; "
                              "build it with a larger max_devices")
        if grouping is None:
            asked = self._n_groups_asked
            grouping = group_graph(graph, min(asked, self.max_groups) if self.padded and asked else asked, len(devices),
                                   self._grouping_method)
            if self.padded and len(grouping) > self.max_groups:
                grouping = group_graph(graph, self.max_groups, len(devices), self._grouping_method)
        elif self.padded and len(grouping) > self.max_groups:
            raise PlacerError(f"the grouping has {len(grouping)} groups, more than max_groups={self.max_groups}; "
                              "build the environment with a larger max_groups")
        self.graph, self.measurer, self.devices, self.grouping = graph, measurer, devices, grouping
        self.n_groups, self.n_devices = len(grouping), len(devices)
        feats = (absolute_group_features if self.padded else group_features)(graph, grouping)
        self.op_types = feats.op_types
        self._features, self._adjacency = feats.features, feats.adjacency
        if self.padded:
            self._device_rows = (device_features(self.cluster) if self.cluster is not None
                                 else np.zeros((len(devices), DEVICE_FEATURES), np.float32))
            self._pair, self._pair_mask = _pair_figures(graph, grouping, getattr(measurer, "cost_model", None),
                                                        self.cluster, devices)

    def _clear(self) -> None:
        width = self.max_groups if self.padded else self.n_groups
        self._placed = np.full(width, self.max_devices if self.padded else self.n_devices, dtype=np.int64)
        self._position = 0

    def _obs(self) -> dict[str, np.ndarray]:
        if not self.padded:
            return {"features": self._features.copy(), "adjacency": self._adjacency.copy(),
                    "placed": self._placed.copy()}
        G, D, Gm, Dm = self.n_groups, self.n_devices, self.max_groups, self.max_devices
        return {"features": _padded(self._features, (Gm, self._features.shape[1])),
                "adjacency": _padded(self._adjacency, (Gm, Gm)),
                "group_mask": (np.arange(Gm) < G).astype(np.int8),
                "devices": _padded(self._device_rows, (Dm, DEVICE_FEATURES)),
                "device_mask": (np.arange(Dm) < D).astype(np.int8),
                "pair": _padded(self._pair, (Gm, Dm, PAIR_FEATURES)),
                "pair_mask": _padded(self._pair_mask, (Gm, Dm), np.int8),
                "placed": self._placed.copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start a new placement: nothing placed yet. `options={"graph": ..., "cluster": ...}` (either
        or both; padded environments only) makes the episode's problem that graph (an `OpGraph`, an
        ONNX path or a zoo name) on that cluster (a `Cluster`, a catalogue name or a TOML file)."""
        super().reset(seed=seed)
        if options:
            self._switch(options)
        self._clear()
        return self._obs(), {}

    def _switch(self, options: dict[str, Any]) -> None:
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise PlacerError(f"unknown reset option {unknown[0]!r}; the options are {', '.join(RESET_OPTIONS)}")
        if not self.padded:
            raise PlacerError("this environment's spaces are sized by its first graph and devices; build it with "
                              "max_groups= and max_devices= to switch graphs or clusters between episodes")
        if self._given_measurer:
            raise PlacerError("the measurer given to this environment measures its own graph on its own devices; "
                              "give a cluster or devices instead to switch graphs or clusters between episodes")
        graph = options.get("graph", self.graph)
        if isinstance(graph, (str, os.PathLike)):
            from placer.kernels.loading import load_graph

            graph = load_graph(graph)
        cluster = options.get("cluster", self.cluster)
        if cluster is not None and not isinstance(cluster, Cluster):
            cluster = load_cluster(os.fspath(cluster))
        if cluster is not None:
            from placer.costmodel.roofline import cluster_measurer

            measurer = cluster_measurer(cluster, graph)
        else:
            from placer.costmodel.simulator import SimulatedMeasurer

            measurer = SimulatedMeasurer(graph, self._device_specs)
        self.cluster = cluster
        self._set_problem(graph, measurer)

    def step(self, action):
        """Place all groups (one-shot) or the next one (sequential); measure once all are placed."""
        if self.mode == "one_shot":
            width = self.max_groups if self.padded else self.n_groups
            self._placed = np.asarray(action, dtype=np.int64).reshape(width).copy()
            self._position = self.n_groups
        else:
            if self._position >= self.n_groups:
                raise RuntimeError("episode is over; call reset() first")
            self._placed[self._position] = int(action)
            self._position += 1
            if self._position < self.n_groups:
                return self._obs(), 0.0, False, False, {}
        chosen = self._placed[:self.n_groups]
        limit = self.max_devices if self.padded else self.n_devices
        if (chosen < 0).any() or (chosen >= limit).any():
            raise ValueError(f"actions must be device indices in [0, {limit})")
        if (chosen >= self.n_devices).any():   # padded: a device this episode does not have
            measurement = Measurement(ok=False, failure="INVALID", reason=f"a group was sent to device index "
                                      f"{int(chosen.max())}; this episode has {self.n_devices} devices (device_mask)")
            return self._obs(), self.reward(measurement), True, False, {
                "measurement": measurement.to_dict(), "placement": None}
        measurement, placement = self.evaluate(chosen)
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


def _padded(values: np.ndarray, shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    """`values` in the corner of zeros of `shape`: past this episode's groups and devices, zero."""
    out = np.zeros(shape, dtype)
    out[tuple(slice(0, n) for n in values.shape)] = values
    return out


def _pair_figures(graph: OpGraph, grouping: Grouping, cost, cluster: Cluster | None,
                  devices: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The graph policy's (group, device) features and mask; without a cost model (measured rewards)
    zero features and every device allowed, without a cluster no memory capacity known."""
    shape = (len(grouping), len(devices))
    if cost is None:
        return np.zeros(shape + (PAIR_FEATURES,), np.float32), np.ones(shape, bool)
    times = group_times(graph, grouping, cost, devices)
    capacity = (np.asarray([cluster.device(d).model.memory_bytes for d in devices], dtype=np.float64)
                if cluster is not None else np.full(len(devices), np.inf))
    return pair_features(times), allowed_devices(times, group_memory(graph, grouping), capacity)


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
