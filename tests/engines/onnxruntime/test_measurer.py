"""`RealMeasurer` over the onnxruntime engine, failures included."""

from __future__ import annotations

import numpy as np
import pytest

from placer.errors import PlacerError
from placer.kernels.loading import load_graph
from placer.measure.measurer import MeasureProtocol
from placer.measure.rounds import Candidate, RoundsProtocol, measure_in_rounds
from placer.placement import Placement
from placer.measure.measurer import RealMeasurer, measurer_for
from testgraphs import branches

from .conftest import CPUS, gather_model, random_placement

QUICK = MeasureProtocol(warmup=1, repeats=3, timeout_s=10)


@pytest.fixture(scope="module")
def graph():
    return load_graph(branches(2, depth=3, width=128, batch=32))


def test_a_placement_is_measured_with_the_engine_recorded(graph):
    m = RealMeasurer(graph, CPUS[:2], QUICK, engine="onnxruntime").measure(random_placement(graph, 2, 0))
    assert m.ok and m.step_time > 0 and len(m.times) == 3
    assert m.protocol["engine"] == "onnxruntime" and m.protocol["devices"] == CPUS[:2]
    # each device holds the weights its partitions read: 3 of the 6 128x128 float matrices at least
    assert set(m.peak_memory) == {"cpu:0", "cpu:1"} and sum(m.peak_memory.values()) >= 6 * 128 * 128 * 4


def test_over_a_memory_cap_is_a_failed_measurement_not_an_exception(graph):
    m = RealMeasurer(graph, ["cpu:0[threads=1,mem=64KiB]", "cpu:1[threads=1]"], QUICK, engine="onnxruntime").measure(
        random_placement(graph, 2, 0))
    assert not m.ok and m.failure == "oom" and "cpu:0" in m.reason


def test_a_kernel_error_is_a_failed_measurement_naming_the_partition():
    g = load_graph(gather_model())
    m = RealMeasurer(g, CPUS[:2], QUICK, feeds={"ids": np.array([1, 2, 99])}, engine="onnxruntime").measure(
        Placement(["cpu:0", "cpu:1"], {"embed": "cpu:0", "t": "cpu:1"}, g.sha256))
    assert not m.ok and m.failure == "kernel_error" and "partition 0 failed on cpu:0" in m.reason


def test_a_step_over_its_time_limit_is_a_timeout():
    g = load_graph(branches(2, depth=8, width=512, batch=256))
    m = RealMeasurer(g, CPUS[:2], MeasureProtocol(warmup=0, repeats=1, timeout_s=0.001), engine="onnxruntime").measure(
        random_placement(g, 2, 0))
    assert not m.ok and m.failure == "timeout"


def test_the_training_objective_is_refused_in_one_line(graph):
    training = MeasureProtocol(objective="training")
    with pytest.raises(PlacerError, match="^the training objective runs on the torch engine; drop --engine onnxruntime$"):
        RealMeasurer(graph, CPUS[:2], training, engine="onnxruntime")
    with pytest.raises(PlacerError, match="torch engine"):
        measurer_for("onnxruntime", graph, CPUS[:2], training)


def test_open_runs_in_interleaved_rounds_beside_the_torch_engine(graph):
    placement = random_placement(graph, 2, 1)
    ort_m, torch_m = (measurer_for(e, graph, CPUS[:2], QUICK) for e in ("onnxruntime", "torch"))
    result = measure_in_rounds([Candidate("ort", lambda: ort_m.open(placement)),
                                Candidate("torch", lambda: torch_m.open(placement))],
                               RoundsProtocol(warmup=1, min_rounds=6, max_rounds=6), reference="ort")
    assert result.rounds == 6 and all(m.ok for m in result.measurements.values())
    assert result.measurements["torch"].paired["reference"] == "ort"
