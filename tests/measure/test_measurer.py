"""RealMeasurer: real step times, failures with reasons instead of exceptions, a cache."""

from __future__ import annotations

import math

import numpy as np
import pytest

from placer.errors import PlacerError
from placer.measure.measurement import INVALID, KERNEL_ERROR, OOM, TIMEOUT, Measurement
from placer.graph.feeds import random_feeds
from placer.measure.measurer import MeasureProtocol, RealMeasurer, step_statistics
from placer.placement import Placement

QUICK = MeasureProtocol(warmup=1, repeats=3, timeout_s=30.0)


def _split(graph, devices=("cpu:0", "cpu:1")) -> Placement:
    return Placement(list(devices), {n: devices[i % len(devices)] for i, n in enumerate(graph.nodes)})


def test_measurement_has_positive_times_spread_memory_and_protocol(branchy):
    _, graph = branchy
    measurer = RealMeasurer(graph, ["cpu:0", "cpu:1"], protocol=QUICK)
    m = measurer.measure(_split(graph))
    assert m.ok and m.failure is None
    assert len(m.times) == 3 and all(t > 0 and math.isfinite(t) for t in m.times)
    assert m.step_time == pytest.approx(float(np.median(m.times)))
    assert m.spread >= 0
    assert set(m.peak_memory) == {"cpu:0", "cpu:1"} and all(v > 0 for v in m.peak_memory.values())
    assert m.protocol["warmup"] == 1 and m.protocol["repeats"] == 3 and m.protocol["timeout_s"] == 30.0
    assert m.protocol["statistic"] == "median" and m.protocol["devices"] == ["cpu:0", "cpu:1"]
    assert Measurement.from_dict(m.to_dict()) == m


def test_every_call_measures_again(branchy):
    # The measurer keeps no cache: the trainer owns the one cache of a run.
    _, graph = branchy
    measurer = RealMeasurer(graph, ["cpu:0", "cpu:1"], protocol=QUICK)
    first = measurer.measure(_split(graph))
    again = measurer.measure(_split(graph))
    assert first.ok and again.ok and not first.cached and not again.cached
    assert again.times is not first.times and len(again.times) == QUICK.repeats


def test_over_cap_placement_is_an_oom_failure_with_predicted_memory(branchy):
    _, graph = branchy
    measurer = RealMeasurer(graph, ["cpu:0[mem=2KiB]", "cpu:1"], protocol=QUICK)
    m = measurer.measure(Placement.single_device(list(graph.nodes), "cpu:0", devices=["cpu:0", "cpu:1"]))
    assert not m.ok and m.failure == OOM and "cap" in m.reason
    assert m.peak_memory["cpu:0"] > 2048 and m.protocol["devices"][0] == "cpu:0[mem=2048]"


def test_slow_placement_is_a_timeout_failure(chain):
    _, graph = chain
    measurer = RealMeasurer(graph, ["cpu:0", "cpu:1"], protocol=MeasureProtocol(warmup=0, repeats=1, timeout_s=1e-9))
    m = measurer.measure(_split(graph))
    assert not m.ok and m.failure == TIMEOUT and m.step_time is None


def test_failing_kernel_is_a_kernel_error_failure(embedding):
    _, graph = embedding
    measurer = RealMeasurer(graph, ["cpu"], protocol=QUICK, feeds={"ids": np.full((2, 5), 50, np.int64)})
    m = measurer.measure(Placement.single_device(list(graph.nodes), "cpu"))
    assert not m.ok and m.failure == KERNEL_ERROR and "embed" in m.reason


def test_placement_on_an_unknown_device_is_invalid(branchy):
    _, graph = branchy
    measurer = RealMeasurer(graph, ["cpu:0", "cpu:1"], protocol=QUICK)
    m = measurer.measure(Placement.single_device(list(graph.nodes), "cpu:7"))
    assert not m.ok and m.failure == INVALID and "cpu:7" in m.reason


def test_random_feeds_are_seeded_and_token_inputs_are_valid_ids(branchy, embedding):
    _, graph = branchy
    a, b, c = random_feeds(graph, 0), random_feeds(graph, 0), random_feeds(graph, 1)
    assert a["x"].shape == (2, 3, 8, 8) and a["x"].dtype == np.float32
    np.testing.assert_array_equal(a["x"], b["x"])
    assert not np.array_equal(a["x"], c["x"])
    ids = random_feeds(embedding[1], 0)["ids"]
    assert ids.dtype == np.int64 and not ids.any()


def test_step_statistics_are_median_and_interquartile_range():
    median, spread = step_statistics([1.0, 2.0, 3.0, 4.0, 100.0])
    assert median == 3.0 and spread == 2.0


def test_bad_protocol_is_refused():
    with pytest.raises(PlacerError):
        MeasureProtocol(repeats=0)


def test_a_training_protocol_measures_training_steps_and_an_inference_one_refuses_a_loss(branchy):
    from placer.program.training import TrainingSpec

    _, graph = branchy
    placement = Placement.single_device(list(graph.nodes), "cpu", devices=["cpu"])
    protocol = MeasureProtocol(warmup=0, repeats=1, objective="training")
    m = RealMeasurer(graph, ["cpu"], protocol=protocol).measure(placement)
    assert m.ok and m.protocol["objective"] == "training" and m.protocol["momentum"] == 0.9
    with pytest.raises(PlacerError, match="inference protocol"):
        RealMeasurer(graph, ["cpu"], training=TrainingSpec())
    with pytest.raises(PlacerError, match="unknown objective"):
        MeasureProtocol(objective="serving")
