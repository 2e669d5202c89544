"""Contention: devices that share a machine run slower while another one is busy.

Two 1-thread virtual CPU devices on one machine share its memory bandwidth, caches and Python's
interpreter lock, so each runs slower while the other works: measured whole-graph steps of split
placements are slower than a simulator that times each device alone predicts. The model here is
one factor per device, `slowdown[d] >= 1`: while another device is busy, `d` runs `slowdown[d]`
times slower. The simulator applies it to its uncontended schedule, to first order: with `O_d` the
seconds `d` is busy while some other device is too, the step grows by max_d (slowdown[d] - 1) * O_d.
The lower bound uses the same model (`placer.costmodel.lower_bound`), so no simulated step beats it.

The factors are fitted from whole-graph measurements of a few split placements
(`placer.costmodel.calibration`): least squares of the relative error, each factor at least 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def overlap_seconds(start: Sequence[float], finish: Sequence[float], device: Sequence[int], n_devices: int
                    ) -> np.ndarray:
    """Per device: the seconds it is busy (running a step) while at least one other device is busy."""
    start, finish = np.asarray(start, dtype=np.float64), np.asarray(finish, dtype=np.float64)
    device = np.asarray(device, dtype=np.int64)
    keep = finish > start
    if n_devices < 2 or not keep.any():
        return np.zeros(n_devices)
    s, f, d = start[keep], finish[keep], device[keep]
    times = np.concatenate([s, f])
    order = np.argsort(times, kind="stable")
    change = np.zeros((len(times), n_devices))
    change[np.arange(len(s)), d] = 1.0
    change[len(s) + np.arange(len(f)), d] = -1.0
    # a device's steps never overlap each other, so its running count is 0 or 1 between events
    busy = np.cumsum(change[order], axis=0)[:-1] > 0.5
    dt = np.diff(times[order])
    shared = busy.sum(axis=1) >= 2
    return (busy * (dt * shared)[:, None]).sum(axis=0)


def contention_extra(overlap: Sequence[float], slowdown: Sequence[float]) -> float:
    """Seconds a step grows by under `slowdown` (one factor per device), given each device's
    `overlap` (`overlap_seconds`): max_d (slowdown[d] - 1) * O_d."""
    factors = np.asarray(slowdown, dtype=np.float64) - 1.0
    if not len(factors) or not (factors > 0).any():
        return 0.0
    return float((factors * np.asarray(overlap, dtype=np.float64)).max())


SCALE = 0.05   # relative errors up to about this count squared in a fit, larger ones about linearly


def fit_error(relative_errors) -> float:
    """The robust (soft L1) loss a fit minimises, over relative errors."""
    z = (np.asarray(relative_errors, dtype=np.float64) / SCALE) ** 2
    return float((2.0 * (np.sqrt(1.0 + z) - 1.0)).sum())


def fit_slowdown(overlaps: np.ndarray, predicted: Sequence[float], measured: Sequence[float],
                 groups: Sequence[int], n_groups: int) -> np.ndarray:
    """One factor (>= 1) per group of devices (a device class) that best explains `measured` step
    times as `predicted` (uncontended) + max_d (factor[groups[d]] - 1) * overlaps[i, d], in relative
    error, robustly (soft L1 beyond 5%). `overlaps` is placements x devices (`overlap_seconds` of each placement's schedule)."""
    from scipy.optimize import least_squares

    overlaps = np.asarray(overlaps, dtype=np.float64)
    predicted = np.asarray(predicted, dtype=np.float64)
    measured = np.asarray(measured, dtype=np.float64)
    groups = np.asarray(groups, dtype=np.int64)
    used = np.zeros(n_groups, dtype=bool)
    used[groups[(overlaps > 0).any(axis=0)]] = True
    if not used.any():
        return np.ones(n_groups)

    def residuals(x: np.ndarray) -> np.ndarray:
        extra = ((x[groups] - 1.0)[None, :] * overlaps).max(axis=1)
        return (predicted + extra - measured) / measured

    # soft_l1: a placement measured in a noisy moment pulls the factors less than the others
    fit = least_squares(residuals, np.ones(n_groups) * 1.1, bounds=(1.0, 10.0), loss="soft_l1", f_scale=SCALE)
    return np.where(used, fit.x, 1.0)
