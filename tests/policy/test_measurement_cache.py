"""The trainer's one measurement cache: each distinct placement measured once, in one batch."""

from __future__ import annotations

from placer.measure.measurement import Measurement
from placer.policy.measurement_cache import MeasurementCache


class CountingMeasurer:
    """Step time = 1 + number of groups on device 1; records every call it gets."""

    devices = ["cpu:0", "cpu:1"]

    def __init__(self, batched: bool) -> None:
        self.calls: list[list[tuple[int, ...]]] = []
        if batched:
            self.measure_many = lambda ps: self._record(ps)

    def _record(self, placements):
        self.calls.append([p for p in placements])
        return [Measurement(ok=True, step_time=1.0 + sum(p)) for p in placements]

    def measure(self, placement):
        return self._record([placement])[0]


def cache_of(measurer) -> MeasurementCache:
    return MeasurementCache(measurer, expand=tuple, n_groups=3)


def test_a_batch_measures_each_distinct_new_placement_once_in_one_call():
    measurer = CountingMeasurer(batched=True)
    cache = cache_of(measurer)
    out = cache.measure_many([[0, 0, 1], [1, 1, 1], [0, 0, 1]])
    assert measurer.calls == [[(0, 0, 1), (1, 1, 1)]]
    assert [m.step_time for m in out] == [2.0, 4.0, 2.0]
    assert [m.cached for m in out] == [False, False, True] and (cache.hits, cache.misses) == (1, 2)
    again = cache.measure_many([[1, 1, 1], [0, 0, 0]])
    assert measurer.calls[-1] == [(0, 0, 0)] and [m.cached for m in again] == [True, False]


def test_a_measurer_without_measure_many_is_called_once_per_new_placement():
    measurer = CountingMeasurer(batched=False)
    cache_of(measurer).measure_many([[0, 1, 0], [0, 1, 0], [1, 0, 0]])
    assert measurer.calls == [[(0, 1, 0)], [(1, 0, 0)]]


def test_state_round_trips_and_rollback_forgets_an_unfinished_batch():
    cache = cache_of(CountingMeasurer(batched=True))
    cache.measure_many([[0, 0, 0]])
    before = cache.counters()
    cache.measure_many([[1, 0, 0], [0, 0, 0]])
    restored = cache_of(CountingMeasurer(batched=True))
    restored.load_state(cache.state())
    assert restored.entries == cache.entries and restored.counters() == cache.counters()
    cache.rollback(before)
    assert list(cache.entries) == [(0, 0, 0)] and cache.counters() == before


def test_an_old_format_cache_is_dropped_not_misread():
    cache = cache_of(CountingMeasurer(batched=True))
    cache.load_state({"entries": [[["n1", "cpu:0"], {"ok": True, "step_time": 1.0}]], "hits": 3, "misses": 1})
    assert cache.entries == {} and cache.counters() == (0, 0, 0)
