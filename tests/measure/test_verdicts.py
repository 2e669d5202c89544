"""The verdict rule (faster or slower only when the whole interval clears the resolution, tied only
when it lies inside it, else "not resolved" with the rounds it would take) and the interval over
blocks (a block that moved must widen it)."""

from __future__ import annotations

import math

import numpy as np

from placer.measure.intervals import (FASTER, NOT_RESOLVED, SLOWER, TIED, Interval, format_interval,
                                      interval_over_blocks, widen_by_runs, median_interval, rounds_to_resolve,
                                      speedup_verdict, verdict, verdict_words)

EDGE = 1.02   # the default resolution's band is [1 / 1.02, 1.02]
MIRROR = {FASTER: SLOWER, SLOWER: FASTER, TIED: TIED, NOT_RESOLVED: NOT_RESOLVED}


def speedup(value, low, high, n=20, blocks=1) -> Interval:
    return Interval(value, low, high, n, blocks=blocks)


def test_each_outcome_of_the_rule():
    assert speedup_verdict(speedup(1.05, 1.03, 1.07)) == FASTER
    assert speedup_verdict(speedup(0.95, 0.93, 0.97)) == SLOWER
    assert speedup_verdict(speedup(1.00, 0.99, 1.01)) == TIED
    # past 2% by its median, not by its whole interval
    assert speedup_verdict(speedup(1.03, 1.01, 1.05)) == NOT_RESOLVED
    # holds 1, but too wide to say the two are the same
    assert speedup_verdict(speedup(1.00, 0.97, 1.03)) == NOT_RESOLVED
    assert verdict_words(speedup(1.00, 0.99, 1.01)) == "tied (within 2%)"
    assert verdict_words(speedup(1.03, 1.01, 1.05)).startswith("not resolved (")


def test_the_three_runs_of_issue_27_read_the_same():
    # read faster, tied, tied under the old rule (the median against 2%); their intervals agree
    runs = [speedup(1.020, 1.018, 1.026), speedup(1.018, 1.013, 1.029), speedup(1.016, 1.006, 1.032)]
    assert [speedup_verdict(r) for r in runs] == [NOT_RESOLVED] * 3


def test_not_resolved_at_the_boundary():
    a_hair = 1.0001
    assert speedup_verdict(speedup(1.05, EDGE, 1.07)) == NOT_RESOLVED        # touching the edge is not clearing it
    assert speedup_verdict(speedup(1.05, EDGE * a_hair, 1.07)) == FASTER
    assert speedup_verdict(speedup(0.95, 0.93, 1 / EDGE)) == NOT_RESOLVED
    assert speedup_verdict(speedup(0.95, 0.93, 1 / EDGE / a_hair)) == SLOWER
    assert speedup_verdict(speedup(1.00, 1 / EDGE, EDGE)) == TIED           # the band itself lies within the band
    assert speedup_verdict(speedup(1.00, 1 / EDGE, EDGE * a_hair)) == NOT_RESOLVED
    assert speedup_verdict(speedup(1.00, 1 / EDGE / a_hair, EDGE)) == NOT_RESOLVED
    # another resolution moves the edges
    assert speedup_verdict(speedup(1.03, 1.01, 1.05), resolution=0.005) == FASTER
    assert speedup_verdict(speedup(1.03, 1.01, 1.05), resolution=0.06) == TIED


def test_the_band_is_symmetric_and_a_time_ratio_is_judged_as_its_speedup():
    for s in (speedup(1.05, 1.03, 1.07), speedup(1.00, 0.99, 1.01), speedup(1.03, 1.01, 1.05),
              speedup(1.05, EDGE * 1.0001, 1.07), speedup(1.0, 1 / EDGE, EDGE)):
        assert speedup_verdict(s.inverse()) == MIRROR[speedup_verdict(s)]
        assert verdict(s.inverse()) == speedup_verdict(s)   # time / reference below 1 is a speedup above 1


def test_an_exact_figure_keeps_every_difference():
    assert speedup_verdict(speedup(1.001, 1.001, 1.001, n=1)) == FASTER
    assert speedup_verdict(speedup(0.999, 0.999, 0.999, n=1)) == SLOWER
    assert speedup_verdict(speedup(1.0, 1.0, 1.0, n=1)) == TIED
    assert rounds_to_resolve(speedup(1.001, 1.001, 1.001, n=1)) is None


def test_an_exact_figure_is_printed_with_the_digits_its_verdict_needs():
    """A simulated 0.24% is 'faster', so it does not print as 1.00x; a measured one keeps two digits."""
    assert format_interval(Interval(1.0024, 1.0024, 1.0024, 1)) == "1.002x"
    assert format_interval(Interval(0.9976, 0.9976, 0.9976, 1)) == "0.998x"
    assert format_interval(Interval(1.0, 1.0, 1.0, 1)) == "1.00x"
    assert format_interval(Interval(1.35, 1.35, 1.35, 1)) == "1.35x"
    assert format_interval(Interval(1.0024, 1.001, 1.004, 20)) == "1.00x [1.00, 1.00]"


def test_the_rounds_to_resolve_grow_as_the_squared_ratio_of_reach_to_gap():
    s = speedup(1.03, 1.01, 1.05)
    growth = (math.log(1.03 / 1.01) / math.log(1.03 / EDGE)) ** 2   # from the value: to the low end, to the edge
    assert rounds_to_resolve(s) == {"rounds": math.ceil(20 * growth), "blocks": 1}
    assert f"about {math.ceil(20 * growth)} rounds would resolve it" in verdict_words(s)
    # measured in blocks, the blocks grow alike (rounds in a block do not narrow the variation between blocks)
    assert rounds_to_resolve(speedup(1.03, 1.01, 1.05, n=30, blocks=3)) == \
        {"rounds": math.ceil(30 * growth), "blocks": math.ceil(3 * growth)}
    # a wide interval around 1 must narrow to inside both edges: the farther side decides
    wide = speedup(1.0, 0.97, 1.04)
    assert rounds_to_resolve(wide)["rounds"] == math.ceil(20 * (math.log(1.04) / math.log(EDGE)) ** 2)
    assert rounds_to_resolve(speedup(1.05, 1.03, 1.07)) is None                    # resolved already
    at_edge = speedup(EDGE, 1.01, 1.03)
    assert rounds_to_resolve(at_edge) is None and "at the edge" in verdict_words(at_edge)


def test_the_rounds_estimate_is_about_what_it_takes():
    # a true speedup of 3.5%, 2% noise a round: at the estimated rounds most measurements resolve,
    # at a quarter of them few do
    at, quarter, judged = 0, 0, 0
    for seed in range(100):
        draws = 1.035 * (1 + np.random.default_rng(seed).normal(0, 0.02, 5000))
        need = rounds_to_resolve(median_interval(draws[:10]))
        if need is None:
            continue
        judged += 1
        at += speedup_verdict(median_interval(draws[:need["rounds"]])) != NOT_RESOLVED
        quarter += speedup_verdict(median_interval(draws[:max(10, need["rounds"] // 4)])) != NOT_RESOLVED
    assert judged >= 40 and at >= 0.6 * judged and quarter <= 0.3 * judged


def test_an_interval_over_blocks_covers_a_block_that_moved():
    rng = np.random.default_rng(0)
    first, second = 1.00 * (1 + rng.normal(0, 0.003, 15)), 1.06 * (1 + rng.normal(0, 0.003, 15))
    a, b = median_interval(first), median_interval(second)
    assert not a.overlaps(b)   # each block alone is tight, and they disagree (as two runs did in issue 27)
    over = interval_over_blocks([first, second])
    assert over.low <= a.value and over.high >= b.value
    assert over.n == 30 and over.blocks == 2
    assert speedup_verdict(over) == NOT_RESOLVED
    # the rounds pooled as if one run: the median's interval lies between the blocks, covering neither
    pooled = median_interval(np.concatenate([first, second]))
    assert pooled.low > a.value and pooled.high < b.value


def test_blocks_that_agree_keep_the_interval_tight_and_deterministic():
    rng = np.random.default_rng(1)
    blocks = [1.05 * (1 + rng.normal(0, 0.003, 12)) for _ in range(3)]
    over = interval_over_blocks(blocks)
    assert over.contains(1.05) and over.relative_half_width < 0.01 and speedup_verdict(over) == FASTER
    assert interval_over_blocks(blocks) == over
    # one block is the order-statistic interval of its median
    assert interval_over_blocks(blocks[:1]) == median_interval(blocks[0])
    # a ratio and its inverse agree: the geometric mean of the block medians
    inverse = interval_over_blocks([1 / b for b in blocks])
    assert math.isclose(inverse.value, 1 / over.value)


def test_the_interval_over_blocks_has_its_coverage_when_runs_differ():
    # runs (blocks) off by 1% from one another, 0.5% noise a round: the true value inside about 95%
    rng = np.random.default_rng(5)
    inside = 0
    for _ in range(400):
        blocks = [np.exp(rng.normal(0, 0.01) + rng.normal(0, 0.005, 10)) for _ in range(3)]
        inside += interval_over_blocks(blocks).contains(1.0)
    assert 0.92 <= inside / 400 <= 0.98


def test_an_interval_over_blocks_is_never_narrower_than_the_rounds_pooled():
    """Three blocks whose medians agree by chance: Student's t over them alone would give an
    interval far narrower than the rounds' own spread, one the next run misses."""
    rng = np.random.default_rng(3)
    blocks = [1.0 + 0.05 * rng.standard_normal(15) for _ in range(3)]
    blocks = [b - np.median(b) + 1.0 + 1e-4 * i for i, b in enumerate(blocks)]   # medians 1.0000, 1.0001, 1.0002
    over = interval_over_blocks(blocks)
    pooled = median_interval(np.concatenate(blocks))
    assert over.low <= pooled.low and over.high >= pooled.high
    assert over.high - over.low > 0.01


def test_widening_by_runs_reaches_t_times_the_spread_on_a_log_scale_and_never_narrows():
    own = Interval(0.100, 0.099, 0.101, 60, blocks=3)
    assert widen_by_runs(own, 0.0, 10, 4) == own and widen_by_runs(own, 0.02, 0, 1) == own
    wide = widen_by_runs(own, 0.02, 10, 4)
    half = 2.228 * 0.02   # Student t at 97.5% with 10 degrees of freedom
    assert math.isclose(wide.high, 0.100 * math.exp(half), rel_tol=1e-3)
    assert math.isclose(wide.low, 0.100 * math.exp(-half), rel_tol=1e-3)
    assert wide.value == own.value and wide.n == own.n and wide.runs == 4
    # a run's own interval wider than the spread between runs is kept
    assert widen_by_runs(Interval(0.100, 0.080, 0.130, 60), 0.01, 10, 4).low == 0.080
    assert Interval.from_dict(wide.to_dict()) == wide and wide.inverse().runs == 4
