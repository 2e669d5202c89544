"""The path-energy bound over plans: a step split over more devices ends sooner, but each shard
pays its device's launch, so the fast splits that make the critical path short cost device time
that the load bound must then find. Neither bound alone sees that trade (the critical path takes
every step at its fastest split, the load bound every step at its cheapest); this one takes both
at once.

For any plan with step time T, any chain pi of dependent steps, any device weights mu >= 0 that
sum to 1 and any lam in [0, 1]:

    T >= lam * (time along pi) + (1 - lam) * sum_d mu_d busy_d

since the chain runs one step after another (T >= its time) and every device is busy at most T.
Say the plan runs step i on device set S_i. Its time is at least D_i(S_i) (`split_bound` over
S_i: a device alone, or several at once, each shard paying its launch) and the weighted device time it
costs is at least E_i(S_i) = sum over d in S_i of mu_d L_d (each shard's launch) + min over d in S_i of
mu_d w_d (its work, all on the cheapest device of the set). With e_i = (1 - lam) min_S E_i(S) and
c_i = min_S [lam D_i(S) + (1 - lam) E_i(S)], steps on pi add at least c_i and the others at least e_i:

    T >= sum_i e_i + max over chains pi of sum_{i in pi} (c_i - e_i)

a longest path with weights c_i - e_i >= 0. The bound is the largest over a grid of lam and the
weights given (the load LP's duals, and each device's speed). Device sets are enumerated up to
symmetry: devices whose step times, launch and contention all match are interchangeable, so a set
is a count of each kind (8 GPUs and 2 CPUs: 26 sets). Past `MAX_SETS` sets (many devices each of its
own kind) the bound is left out (0): its tables would grow as 2^devices. Transfers and collectives
are free, as in the other bounds of plans.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from placer.costmodel.sim_program import SimProgram

LAMBDAS = np.linspace(0.0, 1.0, 21)
MAX_SETS = 256


def path_energy_bound(program: SimProgram, step_times: np.ndarray, launch: Sequence[float],
                      slowdown: Sequence[float], weights: Sequence[Sequence[float]]) -> float:
    """The bound above (seconds) for the steps of `program` priced at `step_times` (steps x
    devices, inf where a step cannot run), the largest over `weights` (each per device, >= 0)."""
    if _set_count(step_times, launch, slowdown) > MAX_SETS:
        return 0.0
    best = 0.0
    for mu in weights:
        mu = np.asarray(mu, dtype=float)
        if mu.sum() <= 0:
            continue
        durations, energies = _menus(step_times, launch, slowdown, mu / mu.sum())
        feasible = np.isfinite(durations) & np.isfinite(energies)   # a set with a device the step cannot run on is not
        durations, energies = np.where(feasible, durations, 0.0), np.where(feasible, energies, 0.0)
        for lam in LAMBDAS:
            c = np.where(feasible, lam * durations + (1 - lam) * energies, np.inf).min(axis=1)
            e = (1 - lam) * np.where(feasible, energies, np.inf).min(axis=1)
            best = max(best, float(e.sum()) + program.longest_path((c - e).tolist()))
    return best


def _kinds(step_times: np.ndarray, launch: Sequence[float], slowdown: Sequence[float]) -> list[list[int]]:
    """The devices grouped by kind: alike in every step's time, launch and contention."""
    kinds: dict[tuple, list[int]] = {}
    for d in range(step_times.shape[1]):
        kinds.setdefault((step_times[:, d].tobytes(), launch[d], slowdown[d]), []).append(d)
    return list(kinds.values())


def _set_count(step_times: np.ndarray, launch: Sequence[float], slowdown: Sequence[float]) -> int:
    return math.prod(len(g) + 1 for g in _kinds(step_times, launch, slowdown)) - 1


def _menus(step_times: np.ndarray, launch: Sequence[float], slowdown: Sequence[float],
           mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per step and per device set (a count of each kind of device): D and E above."""
    groups = _kinds(step_times, launch, slowdown)
    counts = [c for c in itertools.product(*(range(len(g) + 1) for g in groups)) if sum(c)]
    L = np.minimum(np.asarray(launch, dtype=float)[None, :], step_times)
    W = step_times - L
    durations = np.empty((len(step_times), len(counts)))
    energies = np.empty_like(durations)
    for j, count in enumerate(counts):
        devices = [d for g, n in zip(groups, count) for d in g[:n]]
        t, l, w = step_times[:, devices], L[:, devices], W[:, devices]
        runs = np.isfinite(t).all(axis=1)
        split = t[:, 0] if len(devices) == 1 else \
            split_bound(t, [slowdown[d] for d in devices], [launch[d] for d in devices])
        with np.errstate(invalid="ignore"):   # mu 0 times an infinite time: masked below
            durations[:, j] = np.where(runs, split, np.inf)
            energies[:, j] = np.where(runs, (mu[None, devices] * l).sum(axis=1) + (mu[None, devices] * w).min(axis=1),
                                      np.inf)
    return durations, energies


def split_bound(times: np.ndarray, slowdown: Sequence[float], launch: Sequence[float] | None = None) -> np.ndarray:
    """Per row of `times` (seconds on each device, inf where it cannot run): the least time the work
    can take split over all the devices at once, each slowed by its contention factor while the
    others run and every shard paying its device's `launch` whole (none given: 0). A device's share
    s_d takes L_d + s_d w_d <= T, so both 1 <= T sum 1/t_d (as L_d >= s_d L_d) and
    1 <= (T - min L) sum 1/w_d: the larger of the two holds."""
    L = np.minimum(np.asarray(launch if launch is not None else [0.0] * times.shape[1])[None, :], times)
    slow = np.asarray(slowdown)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):   # a step of no work: its rate is infinite
        whole_rate = (1.0 / (times * slow)).sum(axis=1)    # the launch as if it split too: s_d t_d <= T
        work_rate = (1.0 / ((times - L) * slow)).sum(axis=1)
    first = np.min(np.where(np.isfinite(times), L, np.inf), axis=1)
    shared = np.divide(1.0, whole_rate, out=np.full(len(times), np.inf), where=whole_rate > 0)
    launched = np.where(np.isinf(work_rate), first,
                        first + np.divide(1.0, work_rate, out=np.full(len(times), np.inf), where=work_rate > 0))
    return np.maximum(shared, launched)
