"""Sim-to-real in the hybrid run's real phase: keep exploring, and correct the simulator with what
was measured before optimising in it again.

A policy leaves the simulated phase converged (its samples all alike), so measuring its samples
for real would measure one placement again and again and learn nothing. In the real phase each
sample is moved a little (`explore`: every group, with a small probability, goes to another device),
so the real rewards compare placements near the policy's. What the devices say and what the
simulator predicted for the same placements is fitted as a residual (`ResidualFit`, after
DOPPLER's last stage, Zhang et al. 2023): log(measured / simulated) = c0 + c1 * balance, where
balance is the share of the nodes off the busiest device (0 for one device, 1/2 for an even split on
two): the simulator's error on these machines grows with how much the devices run at once
(contention for memory bandwidth and caches). After each real update the policy makes a few more
updates on the corrected simulator, which costs milliseconds, before the next real batch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

# Points kept for the fit: the latest, so that the correction follows the machine.
MAX_POINTS = 512


def explore(actions: torch.Tensor, n_devices: int, rate: float, generator: torch.Generator) -> torch.Tensor:
    """Each group of each sampled placement moves to another device with probability `rate`; a
    placement left unchanged gets one random group moved, so that every sample differs from the
    policy's own choice."""
    if rate <= 0 or n_devices < 2:
        return actions
    K, G = actions.shape
    move = torch.rand((K, G), generator=generator) < rate
    untouched = ~move.any(dim=1)
    forced = torch.randint(0, G, (K,), generator=generator)
    move[untouched, forced[untouched]] = True
    shift = torch.randint(1, n_devices, (K, G), generator=generator)   # never back onto the same device
    return torch.where(move, (actions + shift) % n_devices, actions)


def balance(group_devices, n_devices: int, group_sizes: list[int]) -> float:
    """Share of the nodes off the device that holds the most (0: one device)."""
    counts = np.zeros(n_devices)
    for d, size in zip(group_devices, group_sizes):
        counts[int(d)] += size
    total = counts.sum()
    return float(1.0 - counts.max() / total) if total > 0 else 0.0


@dataclass
class ResidualFit:
    """log(measured / simulated) = c0 + c1 * balance, least squares over the real samples so far."""

    points: list[list[float]] = field(default_factory=list)   # [simulated s, measured s, balance]
    coef: list[float] = field(default_factory=lambda: [0.0, 0.0])

    def add(self, simulated: float, measured: float, x: float) -> None:
        self.points = (self.points + [[simulated, measured, x]])[-MAX_POINTS:]

    def fit(self) -> None:
        """Refit on the points; c1 only when the balances differ enough to tell it from c0."""
        if not self.points:
            return
        sim, real, x = (np.array(c) for c in zip(*self.points))
        y = np.log(real / sim)
        if len(x) >= 3 and np.ptp(x) > 0.05:
            c1, c0 = np.polyfit(x, y, 1)
            self.coef = [float(c0), float(c1)]
        else:
            self.coef = [float(np.median(y)), 0.0]

    def correct(self, simulated: float, x: float) -> float:
        """The simulated step time as the devices would give it, by the fit."""
        return simulated * float(np.exp(self.coef[0] + self.coef[1] * x))

    def relative_errors(self) -> tuple[float, float]:
        """Mean |error| / measured of the raw simulator and of the corrected one, on the points."""
        if not self.points:
            return float("nan"), float("nan")
        raw = [abs(s - m) / m for s, m, _ in self.points]
        fixed = [abs(self.correct(s, x) - m) / m for s, m, x in self.points]
        return float(np.mean(raw)), float(np.mean(fixed))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
