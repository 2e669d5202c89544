"""Workers that disagree: each worker's single-device step times, and those far from the median.

A noisy or different node measures the same placement slower (or faster) than the rest and so
skews the rewards of whatever it measures. At start every worker measures the single-device
placements; a worker more than `TOLERANCE` off the median of the workers on some device is named.
"""

from __future__ import annotations

import statistics

TOLERANCE = 0.10


def off_median(times: dict[str, dict[str, float | None]], tolerance: float = TOLERANCE) -> dict[str, str]:
    """Worker -> what is off, for workers whose step time on some device is more than
    `tolerance` from the median of all workers' on that device (failed runs are not compared)."""
    devices = sorted({d for per_worker in times.values() for d in per_worker})
    off: dict[str, list[str]] = {}
    for device in devices:
        ran = {w: t[device] for w, t in times.items() if t.get(device) is not None}
        if len(ran) < 2:
            continue
        median = statistics.median(ran.values())
        for worker, t in ran.items():
            gap = (t - median) / median if median > 0 else 0.0
            if abs(gap) > tolerance:
                off.setdefault(worker, []).append(
                    f"{device} {abs(gap):.0%} {'slower' if gap > 0 else 'faster'} than the median "
                    f"({t * 1e3:.2f} vs. {median * 1e3:.2f} ms)")
    return {w: "; ".join(parts) for w, parts in off.items()}
