"""Where a fine-tuning sample's step time comes from: the simulator, or the devices themselves.

`SimulatedRewards` prices placements on the cluster's description (the episode's batched
simulator). `MeasuredRewards` runs them on the devices of this machine (`--reward real` on a
cluster `placer cluster describe-local` wrote here): each distinct placement once
(`MeasurementCache`, as the seq2seq learner), a failing one a measured failure (inf), never a
crash. Either way the yardstick is the best list heuristic's placement, priced the same way, so
that a cost keeps the scale the policy was pre-trained on.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from placer.measure.measurement import Measurement, Measurer
from placer.placement import Placement
from placer.policy.gnn.episode import Episode
from placer.policy.measurement_cache import MeasurementCache
from placer.policy.phases import REAL, SIMULATED


class SimulatedRewards:
    """Step times simulated on the cluster's description."""

    reward, figures = SIMULATED, "simulated"

    def __init__(self, episode: Episode) -> None:
        self.episode = episode

    def step_times(self, group_assign: np.ndarray) -> np.ndarray:
        """(N,) seconds of each row of (N, G) device indices per group; inf where it fails."""
        return self.episode.step_times(group_assign)

    def placed(self, placement: Placement) -> float:
        """A placement `place_episode` made: the step time it simulated."""
        return placement.extra["placer"]["simulated_step_time"]

    def heuristic(self) -> float:
        """The best list heuristic's step time (inf: none fits)."""
        return self.episode.best_time

    def counts(self) -> dict[str, Any]:
        """What summary.json says of the rewards beside the sample count."""
        return {}

    def state(self) -> dict[str, Any]:
        """What the checkpoint keeps of them (`load_state` restores it)."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass


class MeasuredRewards:
    """Step times measured by `measurer` on the devices, each distinct group placement once."""

    reward, figures = REAL, "measured"

    def __init__(self, episode: Episode, measurer: Measurer) -> None:
        self.episode = episode
        self.measurer = measurer
        self.cache = MeasurementCache(measurer, episode.placement, episode.features.n_groups)
        self.besides = 0   # placements measured besides the samples: the yardstick, zero-shot, greedy

    def step_times(self, group_assign: np.ndarray) -> np.ndarray:
        return np.asarray([seconds(m) for m in self.cache.measure_many(np.asarray(group_assign).tolist())])

    def placed(self, placement: Placement) -> float:
        self.besides += 1
        return seconds(self.measurer.measure(placement))

    def heuristic(self) -> float:
        placement = self.episode.heuristic_placement()
        return self.placed(placement) if placement is not None else math.inf

    def counts(self) -> dict[str, Any]:
        return {"measured_placements": self.cache.misses + self.besides, "measured_besides_samples": self.besides}

    def state(self) -> dict[str, Any]:
        return {"cache": self.cache.state(), "besides": self.besides}

    def load_state(self, state: dict[str, Any]) -> None:
        self.cache.load_state(state["cache"])
        self.besides = state["besides"]


def seconds(m: Measurement) -> float:
    """A measurement's step time; inf for a failure (out of memory, a timeout, a kernel error)."""
    return m.step_time if m.ok else math.inf
