"""Intervals and verdicts: what a measured figure is worth on a machine whose speed drifts.

Every figure placer reports is a median over interleaved rounds (`placer.measure.rounds`), and
every comparison is paired: two candidates measured in the same rounds give one ratio per round,
so a slow minute slows both and cancels out. The interval of a median is the distribution-free
one from order statistics (the binomial sign-test interval, as in pyperf and the classic
nonparametric texts): it needs no normality, and an outlier round moves it by one rank at most.

Rounds inside one run do not show how far the next run moves (threads that spin, where memory
landed, a machine's state), so a measurement may run in several blocks, each with every candidate
built afresh, and its interval is then taken over blocks as well as rounds (`interval_over_blocks`:
Kalibera and Jones's repetition at every level).

A verdict is computed here, in one place, and every printer reads it. It asks of the WHOLE interval
(an equivalence test, as TOST does), against a band of `RESOLUTION` (2%) around 1, symmetric on a
log scale: a speedup s is faster when its interval lies above 1.02, slower when it lies below
1/1.02 (0.980), tied when it lies inside [1/1.02, 1.02], and "not resolved" otherwise, reported
with its interval and about how many rounds would resolve it. So a true difference near 2% reads
"not resolved" rather than "faster" in one run and "tied" in the next (issue 27: 1.020 [1.018,
1.026], 1.018 [1.013, 1.029], 1.016 [1.006, 1.032] read faster, tied, tied). Exact figures (a
simulator's, n = 1) are not measured and keep every difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.stats import binom
from scipy.stats import t as student_t

CONFIDENCE = 0.95
# With fewer rounds than this no order-statistic interval reaches 95%: (1/2)^5 * 2 > 5%.
MIN_ROUNDS_FOR_INTERVAL = 6

FASTER, SLOWER, TIED, NOT_RESOLVED = "faster", "slower", "tied", "not resolved"
# The smallest difference a verdict calls a difference: between two runs of the same comparison a
# ratio moves by about 1%.
RESOLUTION = 0.02
# Past this many times the rounds taken, an estimate of the rounds a verdict needs is not worth giving:
# the value sits at the band's edge.
MAX_GROWTH = 100.0


@dataclass(frozen=True)
class Interval:
    """A median and its confidence interval (`low` <= `value` <= `high`)."""

    value: float
    low: float
    high: float
    n: int                       # rounds, over every block
    confidence: float = CONFIDENCE
    blocks: int = 1              # measured in this many blocks, each built afresh (`interval_over_blocks`)
    runs: int = 1                # widened by the spread of this many runs (`widen_by_runs`)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Interval:
        """The inverse of `to_dict` (a dict written before blocks were recorded is one block)."""
        return cls(data["value"], data["low"], data["high"], data["n"], data.get("confidence", CONFIDENCE),
                   data.get("blocks", 1), data.get("runs", 1))

    def inverse(self) -> Interval:
        """1 / this: a time ratio as a speedup, or back."""
        return Interval(1 / self.value, 1 / self.high, 1 / self.low, self.n, self.confidence, self.blocks, self.runs)

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


def format_exact_ratio(value: float, digits: int = 2) -> str:
    """An exact (simulated) ratio with the digits it takes not to read as 1 when it is not:
    '1.002x' rather than '1.00x' beside the word 'faster' (at most 4)."""
    while value != 1.0 and f"{value:.{digits}f}" == f"{1.0:.{digits}f}" and digits < 4:
        digits += 1
    return format_ratio(value, digits=digits)


def format_interval(interval: Interval | Mapping[str, Any] | None, digits: int = 2) -> str:
    """An `Interval`, or its dict form ({'value', 'low', 'high', 'n'}), as a ratio: '1.32x [1.28, 1.35]',
    '1.32x' for an exact (simulated, n < 2) figure, '-' for none."""
    if interval is None:
        return "-"
    if isinstance(interval, Mapping):
        interval = Interval.from_dict(interval)
    if interval.n < 2:
        return format_exact_ratio(interval.value, digits)
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


def interval_over_blocks(blocks, confidence: float = CONFIDENCE) -> Interval:
    """The figure of samples taken in blocks (a list of per-block samples: step times, or paired
    ratios) with an interval that holds the variation between blocks as well as within them. One
    block: its median and order-statistic interval (`median_interval`). Several: the geometric mean
    of the block medians (a ratio and its inverse then agree), with Student's t interval over the
    block medians on a log scale. As Kalibera and Jones show, the spread of the top level's figures
    holds every level beneath it (a block median varies with its rounds too), and with few blocks
    only t keeps its coverage: a bootstrap over 3 blocks that moved by 1% covered the true value
    81% of the time, t 95%. Nor is it ever narrower than the rounds pooled say (their order-statistic
    interval): three block medians that happen to agree would otherwise give an interval a tenth of
    the rounds' spread, which the next run missed (a compare row: [111.0, 111.4] ms against
    [111.6, 112.8] ms the run before)."""
    groups = [np.asarray(b, dtype=np.float64) for b in blocks if len(b)]
    if not groups:
        raise ValueError("no samples")
    if len(groups) == 1:
        return median_interval(groups[0], confidence)
    logs = np.array([np.median(np.log(g)) for g in groups])   # of an even count: the geometric midpoint
    centre = float(logs.mean())
    half = float(student_t.ppf(0.5 + confidence / 2, len(logs) - 1) * logs.std(ddof=1) / np.sqrt(len(logs)))
    pooled = median_interval(np.concatenate(groups), confidence)
    return Interval(float(np.exp(centre)), min(float(np.exp(centre - half)), pooled.low),
                    max(float(np.exp(centre + half)), pooled.high), sum(len(g) for g in groups), confidence,
                    len(groups))


def widen_by_runs(interval: Interval, spread: float, df: int, runs: int) -> Interval:
    """`interval` (one run's, its rounds and blocks) widened to hold the variation between runs: at
    least the value times exp(+-t * `spread`), with `spread` the standard deviation of a figure's
    log from one run to the next, estimated with `df` degrees of freedom over `runs` runs. This is
    the level above blocks in Kalibera and Jones's repetition: a machine whose speed drifts over
    minutes (one device read 113.4, 115.0, 116.7 ms in three quiet runs) moves every block of a run
    alike, so no interval from inside one run can hold it. No spread (df < 1) leaves it as it is."""
    if df < 1 or spread <= 0:
        return interval
    half = float(student_t.ppf(0.5 + interval.confidence / 2, df) * spread)
    return Interval(interval.value, min(interval.low, interval.value * float(np.exp(-half))),
                    max(interval.high, interval.value * float(np.exp(half))), interval.n, interval.confidence,
                    interval.blocks, runs)


def speedup_verdict(speedup: Interval, resolution: float = RESOLUTION) -> str:
    """For a speedup (reference time / time): FASTER when its whole interval lies above 1 +
    `resolution`, SLOWER when below 1 / (1 + `resolution`), TIED when inside both, else
    NOT_RESOLVED. An exact figure (n <= 1) keeps every difference."""
    if speedup.n <= 1:
        return FASTER if speedup.value > 1.0 else SLOWER if speedup.value < 1.0 else TIED
    below, above = 1.0 / (1.0 + resolution), 1.0 + resolution
    if speedup.low > above:
        return FASTER
    if speedup.high < below:
        return SLOWER
    if below <= speedup.low and speedup.high <= above:
        return TIED
    return NOT_RESOLVED


def verdict(ratio: Interval, resolution: float = RESOLUTION) -> str:
    """For a time ratio (time / reference, below 1: faster): the verdict of its speedup."""
    return speedup_verdict(ratio.inverse(), resolution)


def rounds_to_resolve(interval: Interval, resolution: float = RESOLUTION) -> dict[str, int] | None:
    """About how many rounds (and blocks) a "not resolved" ratio or speedup would need: its interval
    shrinks as 1/sqrt(n), so n grows by (reach / gap)^2, where for each band edge inside the interval
    the gap runs from the value to the edge and the reach from the value to the interval's end past
    it (on a log scale, where the band is symmetric). Blocks grow alike when there are several (more
    rounds in a block do not narrow the variation between blocks). None when resolved, or when the
    value sits at an edge (over `MAX_GROWTH` times the rounds)."""
    if interval.n <= 1 or speedup_verdict(interval, resolution) != NOT_RESOLVED:
        return None
    value, low, high = np.log([interval.value, interval.low, interval.high])
    growth = 1.0
    for edge in (-np.log1p(resolution), np.log1p(resolution)):
        if not low <= edge <= high:
            continue
        gap = abs(value - edge)
        reach = value - low if value > edge else high - value
        if reach > gap * np.sqrt(MAX_GROWTH):
            return None
        growth = max(growth, (reach / gap) ** 2)
    blocks = interval.blocks if interval.blocks == 1 else int(np.ceil(interval.blocks * growth))
    return {"rounds": max(interval.n + 1, int(np.ceil(interval.n * growth))), "blocks": blocks}


def verdict_record(speedup: Interval, resolution: float = RESOLUTION) -> dict[str, Any]:
    """A speedup's verdict as compare.json and the run summary keep it: the verdict, the resolution
    it was judged at, and for "not resolved" the rounds (and blocks) that would resolve it."""
    return {"verdict": speedup_verdict(speedup, resolution), "resolution": resolution,
            "to_resolve": rounds_to_resolve(speedup, resolution)}


def verdict_words(speedup: Interval, resolution: float = RESOLUTION) -> str:
    """A speedup's verdict as a user reads it: 'faster', 'slower', 'tied (within 2%)', or
    'not resolved (the interval crosses an edge of the 2% band; about 40 rounds would resolve it)'."""
    said = speedup_verdict(speedup, resolution)
    if said == TIED:
        return f"tied (within {resolution:.0%})"
    if said != NOT_RESOLVED:
        return said
    need = rounds_to_resolve(speedup, resolution)
    if need is None:
        estimate = f"it sits at the edge: over {MAX_GROWTH:.0f}x these rounds would be needed"
    elif need["blocks"] > 1:
        estimate = f"about {need['blocks']} blocks ({need['rounds']} rounds) would resolve it"
    else:
        estimate = f"about {need['rounds']} rounds would resolve it"
    return f"not resolved (the interval crosses an edge of the {resolution:.0%} band; {estimate})"


def speedup_words(ratio: Interval) -> str:
    """A time ratio as a user reads it, as a speedup: '1.32x [1.28, 1.35], faster'."""
    speed = ratio.inverse()
    return f"{format_ratio(speed.value, speed.low, speed.high)}, {verdict_words(speed)}"
