"""Intervals and verdicts: what a measured figure is worth on a machine whose speed drifts.

Every figure placer reports is a median over interleaved rounds (`placer.measure.rounds`), and
every comparison is paired: two candidates measured in the same rounds give one ratio per round,
so a slow minute slows both and cancels out. The interval of a median is the distribution-free
one from order statistics (the binomial sign-test interval, as in pyperf and the classic
nonparametric texts): it needs no normality, and an outlier round moves it by one rank at most.
A verdict is computed here, in one place, and every printer reads it: a difference whose interval
holds 1 is "tied", never a result; so is a measured difference smaller than `MIN_EFFECT`, as in
asv's `--factor`: one run's interval does not show how far the next run moves (the main job's
learned placement against m-SCT read 1.01x [1.00, 1.01], [1.00, 1.02] and [1.00, 1.01] in three
runs, "faster", "tied", "faster").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.stats import binom

CONFIDENCE = 0.95
# With fewer rounds than this no order-statistic interval reaches 95%: (1/2)^5 * 2 > 5%.
MIN_ROUNDS_FOR_INTERVAL = 6

FASTER, SLOWER, TIED = "faster", "slower", "tied"
# A measured difference under 2% is tied even when its interval misses 1: between two runs of the
# same comparison a ratio moves by about 1%, beyond what one run's interval shows. Exact figures
# (a simulator's, n = 1) are not measured and keep every difference.
MIN_EFFECT = 0.02


@dataclass(frozen=True)
class Interval:
    """A median and its confidence interval (`low` <= `value` <= `high`)."""

    value: float
    low: float
    high: float
    n: int
    confidence: float = CONFIDENCE

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    @property
    def relative_half_width(self) -> float:
        """How far the interval reaches from the value, as a fraction of it (the larger side)."""
        if self.value <= 0:
            return float("inf")
        return max(self.high / self.value - 1.0, 1.0 - self.low / self.value)

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def format_ratio(self) -> str:
        """'1.230x [1.200, 1.260]'."""
        return format_ratio(self.value, self.low, self.high, digits=3)


def format_bounds(low: float, high: float, digits: int = 2) -> str:
    """'[1.28, 1.35]': an interval's bounds as every figure of placer prints them."""
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


def format_ratio(value: float, low: float | None = None, high: float | None = None, digits: int = 2) -> str:
    """A ratio or speedup as placer prints it: '1.32x [1.28, 1.35]', or '1.32x' without bounds."""
    figure = f"{value:.{digits}f}x"
    return figure if low is None or high is None else f"{figure} {format_bounds(low, high, digits)}"


def format_interval(interval: Interval | Mapping[str, Any] | None, digits: int = 2) -> str:
    """An `Interval`, or its dict form ({'value', 'low', 'high', 'n'}), as a ratio: '1.32x [1.28, 1.35]',
    '1.32x' for an exact (simulated, n < 2) figure, '-' for none."""
    if interval is None:
        return "-"
    if isinstance(interval, Mapping):
        interval = Interval(interval["value"], interval["low"], interval["high"], interval["n"])
    if interval.n < 2:
        return format_ratio(interval.value, digits=digits)
    return format_ratio(interval.value, interval.low, interval.high, digits)


def median_interval(samples, confidence: float = CONFIDENCE) -> Interval:
    """The median of `samples` and its distribution-free interval: the k-th smallest and k-th
    largest samples, with k the largest rank whose binomial tail keeps the coverage. With too
    few samples for the coverage, the interval is the whole range (and `n` says why)."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    n = len(x)
    if n == 0:
        raise ValueError("no samples")
    median = float(np.median(x))
    alpha = 1.0 - confidence
    # P(fewer than k samples below the true median) = binom.cdf(k - 1, n, 1/2) must stay <= alpha/2
    k = int(binom.ppf(alpha / 2, n, 0.5))
    if k >= 1 and binom.cdf(k - 1, n, 0.5) > alpha / 2:
        k -= 1
    if k < 1:
        return Interval(median, float(x[0]), float(x[-1]), n, confidence)
    return Interval(median, float(x[k - 1]), float(x[n - k]), n, confidence)


def paired_ratio(times, reference_times, confidence: float = CONFIDENCE) -> Interval:
    """The ratio of two candidates measured in the same rounds: the median of the per-round ratios
    `times[i] / reference_times[i]`, with its interval. Below 1: faster than the reference."""
    a = np.asarray(times, dtype=np.float64)
    b = np.asarray(reference_times, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.shape} vs {b.shape}")
    return median_interval(a / b, confidence)


def _resolved(ratio: Interval, min_effect: float) -> bool:
    """Whether a ratio's difference from 1 is at least what a measurement resolves."""
    return ratio.n <= 1 or abs(ratio.value - 1.0) >= min_effect


def verdict(ratio: Interval, min_effect: float = MIN_EFFECT) -> str:
    """FASTER when the whole interval of time / reference lies below 1, SLOWER above, else TIED;
    TIED too when a measured ratio is within `min_effect` of 1."""
    if ratio.high < 1.0 and _resolved(ratio, min_effect):
        return FASTER
    if ratio.low > 1.0 and _resolved(ratio, min_effect):
        return SLOWER
    return TIED


def speedup_verdict(speedup: Interval, min_effect: float = MIN_EFFECT) -> str:
    """For a speedup (reference time / time): FASTER when its whole interval lies above 1, SLOWER
    below, else TIED; TIED too when a measured speedup is within `min_effect` of 1."""
    if speedup.low > 1.0 and _resolved(speedup, min_effect):
        return FASTER
    if speedup.high < 1.0 and _resolved(speedup, min_effect):
        return SLOWER
    return TIED


def why_tied(interval: Interval) -> str:
    """Why a tied verdict is tied: its interval holds 1, or the difference is under `MIN_EFFECT`."""
    return "the interval holds 1" if interval.contains(1.0) else f"under the {MIN_EFFECT:.0%} a run resolves"


def speedup_words(ratio: Interval) -> str:
    """A time ratio as a user reads it, as a speedup: '1.32x [1.28, 1.35] (faster)', or 'tied (...)'."""
    v = verdict(ratio)
    speed = Interval(1 / ratio.value, 1 / ratio.high, 1 / ratio.low, ratio.n, ratio.confidence)
    figure = format_ratio(speed.value, speed.low, speed.high)
    if v == TIED:
        return f"tied ({figure}, {why_tied(ratio)})"
    return f"{figure} ({v})"
