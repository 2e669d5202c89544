"""`TrainState`: the counters and results of a training run, as plain data a checkpoint carries."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from placer.measure.measurement import Measurement
from placer.policy.phases import REAL, SIMULATED

# Placements measured again at the end: the fastest of a noisy lot is often just the luckiest.
TOP_K = 5
# Mean entropy per group (nats) under which the policy counts as converged: its samples then
# differ from its greedy placement in about one group in 50 on two devices.
CONVERGED_ENTROPY = 0.1


@dataclass
class TrainState:
    """The counters and results that a checkpoint carries besides the tensors."""

    samples: int = 0                      # placements sampled from the policy so far (on a described
                                          # cluster every placement simulated: `TrainingSession.count_evaluated`)
    updates: int = 0
    baseline: float | None = None
    wall_time_s: float = 0.0              # training time over all sessions of this run
    best: dict[str, Any] | None = None    # {"step_time", "group_devices", "measurement", "source"}
    top: list[dict[str, Any]] = field(default_factory=list)   # the TOP_K fastest distinct, like `best`
    single_device: dict[str, dict[str, Any]] = field(default_factory=dict)  # device -> measurement
    phase: str = REAL                     # the reward of the next samples: "real" or "simulated"
    phase_samples: dict[str, int] = field(default_factory=dict)   # samples taken with each reward
    switched_at: int | None = None        # hybrid: samples when real measurement took over
    simulated: dict[str, Any] | None = None   # hybrid: the simulated phase's best, top, single devices
    history: list[dict[str, Any]] = field(default_factory=list)   # one entry per update
    losses: list[float] = field(default_factory=list)             # policy loss of every update
    greedy: dict[str, Any] | None = None  # the policy's own (greedy) placement, as last measured
    warm_start: dict[str, Any] | None = None  # what the policy imitated before learning, and how long it took
    stopped: str | None = None            # "converged" when the run ended before its budget for that reason
    sim_to_real: dict[str, Any] | None = None  # hybrid, real phase: the residual fit (`policy.sim_to_real`)

    def consider(self, group_devices: list[int], measurement: Measurement, source: str) -> bool:
        """Keep the fastest successful placements seen so far (in the current phase's figures);
        True when this one is the new best."""
        if not measurement.ok:
            return False
        if self.phase == SIMULATED:
            source += ", simulated"
        entry = {"step_time": measurement.step_time, "group_devices": list(group_devices),
                 "measurement": measurement.to_dict(), "source": source}
        if all(t["group_devices"] != entry["group_devices"] for t in self.top):
            self.top = sorted(self.top + [entry], key=lambda t: t["step_time"])[:TOP_K]
        if self.best is None or measurement.step_time < self.best["step_time"]:
            self.best = entry
            return True
        return False

    def start_real_phase(self) -> None:
        """Hybrid: keep the simulated phase's results apart and start the real phase afresh.

        The moving-average baseline holds simulated rewards, on another scale (the profiled
        simulator's times differ from measured ones by a factor that varies with load): against it
        every real sample would look uniformly good or bad. None: the first real batch is scored
        against its own mean, and the moving average goes on from there."""
        self.simulated = {"samples": self.samples, "best": self.best, "top": self.top,
                          "single_device": self.single_device}
        self.phase, self.switched_at = REAL, self.samples
        self.best, self.top, self.single_device = None, [], {}
        self.baseline = None

    def settled(self) -> bool:
        """The policy has converged (entropy per group), its last batch only repeated placements
        measured before, and its own placement is the best one known. Entropy alone is not enough:
        right after the warm start most groups are already certain, the mean is low, and yet the
        samples still explore. And a policy can converge on a placement slower than one it has
        seen (ResNet-50, two devices, seed 1: 1.2% slower); with every sample alike the advantages
        are zero, so only the imitation term acts and more updates move it onto the best one."""
        last = self.history[-1] if self.history else {}
        greedy = self.greedy["step_time"] if self.greedy else None
        return (last.get("entropy_per_group", math.inf) <= CONVERGED_ENTROPY and last.get("repeated", 0.0) == 1.0
                and greedy is not None and self.best is not None and greedy <= self.best["step_time"])
