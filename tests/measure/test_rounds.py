"""Interleaved rounds and their intervals, on fake runs whose step times are set by the test: a
machine whose speed drifts is a clock the test turns."""

from __future__ import annotations

import numpy as np
import pytest

from placer.engines.failures import StepTimeout
from placer.measure.intervals import FASTER, median_interval, paired_ratio, verdict
from placer.measure.rounds import Candidate, RoundsProtocol, measure_in_rounds


class Machine:
    """A shared machine: each step's time is the candidate's cost times the machine's current
    slowness, which drifts by 2x across the session, a step every `steady` calls (drift takes
    minutes, a round seconds), and wobbles a little (seeded)."""

    def __init__(self, drift: float = 2.0, wobble: float = 0.005, seed: int = 0, over_calls: int = 40,
                 steady: int = 1) -> None:
        self.calls: list[str] = []
        self.drift = drift
        self.rng = np.random.default_rng(seed)
        self.wobble = wobble
        self.over_calls = over_calls
        self.steady = steady

    def slowness(self) -> float:
        return 1.0 + (self.drift - 1.0) * min(1.0, len(self.calls) // self.steady * self.steady / self.over_calls) + self.rng.normal(0, self.wobble)

    def candidate(self, name: str, cost: float, fail_at: int | None = None) -> Candidate:
        machine = self

        class Run:
            peak_memory = {"cpu:0": 1}
            steps = 0
            closed = False

            def step(self) -> float:
                self.steps += 1
                slowness = machine.slowness()
                machine.calls.append(name)
                if fail_at is not None and self.steps >= fail_at:
                    raise StepTimeout("step exceeded its time limit of 1s")
                return cost * slowness

            def close(self) -> None:
                self.closed = True

        return Candidate(name, Run)


def test_every_round_runs_every_candidate_once_in_a_shuffled_order():
    m = Machine()
    names = ["a", "b", "c", "d"]
    result = measure_in_rounds([m.candidate(n, 1.0) for n in names], RoundsProtocol(warmup=1, min_rounds=12, max_rounds=12))
    assert result.rounds == 12 and len(result.order) == 12
    for order in result.order:
        assert sorted(order) == names
    assert len({tuple(o) for o in result.order}) > 1, "the order must change from round to round"
    # what ran is what the rounds say ran: warm-up round first, then each round in its order
    assert m.calls[4:] == [n for order in result.order for n in order]
    assert sorted(m.calls[:4]) == names


def test_a_paired_ratio_cancels_the_machine_drifting_2x():
    m = Machine(drift=2.0, steady=2)
    result = measure_in_rounds([m.candidate("ref", 0.10), m.candidate("fast", 0.08)],
                               RoundsProtocol(warmup=0, min_rounds=20, max_rounds=20), reference="ref")
    fast = result.measurements["fast"]
    ratio = result.ratio("fast", "ref")
    assert ratio.contains(0.8) and ratio.relative_half_width < 0.02
    assert fast.paired["reference"] == "ref" and fast.paired["value"] == ratio.value
    # unpaired, the drift makes the medians' own intervals overlap: pairing is what decides
    assert median_interval(fast.times).overlaps(median_interval(result.measurements["ref"].times))
    assert verdict(ratio) == FASTER


def test_rounds_stop_once_every_interval_is_within_the_precision():
    m = Machine(drift=1.0, wobble=0.001)
    result = measure_in_rounds([m.candidate("a", 1.0), m.candidate("b", 1.5)],
                               RoundsProtocol(warmup=0, min_rounds=8, max_rounds=40, precision=0.02))
    assert result.rounds == 8 and result.capped is None and result.cap_note() is None


def test_a_cap_stops_noisy_rounds_and_says_so():
    m = Machine(drift=1.0, wobble=0.2)
    result = measure_in_rounds([m.candidate("a", 1.0), m.candidate("b", 1.0)],
                               RoundsProtocol(warmup=0, min_rounds=6, max_rounds=9, precision=0.01))
    assert result.rounds == 9 and result.capped == "rounds"
    assert "cap of 9 rounds" in result.cap_note()
    assert result.measurements["b"].protocol["capped"] == "rounds"


def test_a_candidate_failing_mid_rounds_is_a_measured_failure_and_the_others_go_on():
    m = Machine()
    result = measure_in_rounds([m.candidate("ok", 1.0), m.candidate("bad", 1.0, fail_at=3)],
                               RoundsProtocol(warmup=0, min_rounds=6, max_rounds=6))
    bad = result.measurements["bad"]
    assert not bad.ok and bad.failure == "timeout" and "time limit" in bad.reason
    assert result.measurements["ok"].ok and len(result.measurements["ok"].times) == 6
    assert m.calls.count("bad") == 3


def test_a_candidate_that_cannot_be_built_is_a_failure_not_a_crash():
    def broken():
        raise RuntimeError("no such device")

    m = Machine()
    result = measure_in_rounds([m.candidate("ok", 1.0), Candidate("broken", broken)],
                               RoundsProtocol(warmup=0, min_rounds=6, max_rounds=6))
    assert result.measurements["broken"].failure == "kernel_error"
    assert result.measurements["ok"].ok


def test_the_median_interval_has_its_coverage():
    # a sample of the standard normal: the true median 0 lies inside about 95% of intervals
    rng = np.random.default_rng(1)
    inside = sum(median_interval(rng.standard_normal(15)).contains(0.0) for _ in range(2000))
    assert 0.93 <= inside / 2000 <= 0.995
    small = median_interval([3.0, 1.0, 2.0])
    assert (small.low, small.value, small.high) == (1.0, 2.0, 3.0)   # too few for 95%: the whole range


class Builds:
    """Candidates whose speed is set when they are built, as a run's state is (threads that spin,
    where memory lands): build k of "moody" runs at `moods[k]` times its cost, "steady" always at 1."""

    def __init__(self, moods: list[float]) -> None:
        self.moods, self.built, self.closed, self.calls = moods, {}, {}, []

    def candidate(self, name: str, cost: float) -> Candidate:
        builds = self

        def build():
            k = builds.built[name] = builds.built.get(name, 0) + 1
            factor = builds.moods[k - 1] if name == "moody" else 1.0
            noise = np.random.default_rng(k * 7 + len(name))

            class Run:
                peak_memory = {"cpu:0": k}

                def step(self) -> float:
                    builds.calls.append((name, k))
                    return cost * factor * (1 + noise.normal(0, 0.002))

                def close(self) -> None:
                    builds.closed[name] = builds.closed.get(name, 0) + 1

            return Run()

        return Candidate(name, build)


def test_blocks_build_every_candidate_afresh_and_the_interval_spans_them():
    b = Builds(moods=[1.0, 1.06, 1.0])
    result = measure_in_rounds([b.candidate("steady", 1.0), b.candidate("moody", 1.0)],
                               RoundsProtocol(warmup=1, min_rounds=8, max_rounds=8, blocks=3), reference="steady")
    assert b.built == b.closed == {"steady": 3, "moody": 3}
    assert result.blocks == [0] * 8 + [1] * 8 + [2] * 8 and result.rounds == 24
    # each block ran on its own build, warm-up first
    assert [k for _, k in b.calls] == [1] * 18 + [2] * 18 + [3] * 18
    per_block = [result.ratio("moody", "steady", block) for block in range(3)]
    assert not per_block[0].overlaps(per_block[1])   # the second build is 6% slower
    over = result.ratio("moody", "steady")
    assert over.blocks == 3 and over.n == 24
    assert over.low <= min(r.value for r in per_block) and over.high >= max(r.value for r in per_block)
    moody = result.measurements["moody"]
    assert moody.interval == result.interval("moody").to_dict() and moody.interval["blocks"] == 3
    assert moody.paired["blocks"] == 3 and moody.protocol["blocks_run"] == 3
    assert moody.peak_memory == {"cpu:0": 3}   # the last build's


def test_one_block_is_the_interleaved_rounds_as_before():
    b = Builds(moods=[1.0])
    result = measure_in_rounds([b.candidate("steady", 1.0), b.candidate("moody", 1.2)],
                               RoundsProtocol(warmup=0, min_rounds=8, max_rounds=8), reference="steady")
    ratio = result.ratio("moody", "steady")
    assert ratio.blocks == 1 and ratio == paired_ratio(result.measurements["moody"].times,
                                                       result.measurements["steady"].times)


def test_a_cap_in_seconds_is_shared_by_the_blocks():
    protocol = RoundsProtocol(warmup=0, min_rounds=6, max_rounds=6, max_seconds=30, blocks=3)
    result = measure_in_rounds([Builds([1.0] * 3).candidate("steady", 1.0)], protocol)
    assert result.capped is None and result.rounds == 18
    result.capped = "seconds"
    assert "10 s a block" in result.cap_note() and "3 blocks" in result.cap_note()


def test_a_protocol_too_short_for_an_interval_is_refused():
    from placer.errors import PlacerError

    with pytest.raises(PlacerError, match="6 rounds"):
        RoundsProtocol(min_rounds=3)


def test_a_protocol_without_a_block_is_refused():
    from placer.errors import PlacerError

    with pytest.raises(PlacerError, match="block"):
        RoundsProtocol(blocks=0)
