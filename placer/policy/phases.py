"""Where the reward comes from: real measurement, the simulator, or the simulator then the real devices.

`--reward real` measures every sampled placement on the real devices (slow, exact). `simulated`
scores every sample with the simulator (thousands of samples a minute). `hybrid` learns in the
simulator for the first part of the budget and fine-tunes with real measurement for the rest,
carrying the policy, the optimiser and the learning-rate schedule across. Whatever the mode, the
figures a run reports are real measurements: the trainer measures its best placements and every
single device again, side by side, on the real devices at the end.

At the switch the policy, the Adam state and the learning-rate schedule carry over; the reward
baseline does not: it averages simulated rewards, whose scale differs from measured ones, so the
first real batch is scored against its own mean and the moving average restarts from there.
The single devices are measured for real at the switch and compete in the real phase.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from placer.errors import PlacerError

REWARDS = ("real", "simulated", "hybrid")
SIMULATED, REAL = "simulated", "real"
DEFAULT_REAL_FRACTION = 0.25


@dataclass(frozen=True)
class RewardPlan:
    """Which reward each sample gets. In `hybrid`, the first `1 - real_fraction` of the sample
    count (rounded down to whole updates) or of the time budget is simulated, the rest real."""

    reward: str = REAL
    real_fraction: float = DEFAULT_REAL_FRACTION

    def __post_init__(self) -> None:
        if self.reward not in REWARDS:
            raise PlacerError(f"unknown reward {self.reward!r}; use one of {', '.join(REWARDS)}")
        if self.reward == "hybrid" and not 0.0 < self.real_fraction < 1.0:
            raise PlacerError(f"--real-fraction must be between 0 and 1 (exclusive) for --reward hybrid, "
                              f"not {self.real_fraction}")

    @property
    def first_phase(self) -> str:
        """The reward the first samples get."""
        return REAL if self.reward == REAL else SIMULATED

    def switch_sample(self, samples: int, per_update: int) -> int | None:
        """With a sample count: the sample number at which hybrid turns to real measurement."""
        if self.reward != "hybrid":
            return None
        return per_update * math.floor(samples * (1.0 - self.real_fraction) / per_update)

    def switch_time(self, budget_s: float) -> float | None:
        """With a time budget: the seconds of the session after which hybrid turns real."""
        return budget_s * (1.0 - self.real_fraction) if self.reward == "hybrid" else None

    def identity(self) -> dict[str, Any]:
        """What a checkpoint must match to be resumed under this plan."""
        return {"reward": self.reward, "real_fraction": self.real_fraction if self.reward == "hybrid" else None}
