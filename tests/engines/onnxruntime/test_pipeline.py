"""The onnxruntime engine's pipelined step: M micro-batches through one placement's sessions,
several in flight, each micro-batch computing what ORT computes on the whole model."""

from __future__ import annotations

import weakref

import numpy as np
import pytest

import placer.engines.onnxruntime.concurrent as engine
from placer.engines.failures import KernelError
from placer.engines.torch.executor import accounted_memory
from placer.kernels.loading import load_graph
from placer.graph.feeds import random_feeds
from placer.measure.measurer import MeasureProtocol
from placer.program.pipeline import Pipeline
from placer.placement import Placement
from placer.measure.measurer import RealMeasurer, measurer_for
from placer.engines.onnxruntime.placed import OrtPlacement
from testgraphs import branches

from .conftest import CPUS, assert_same, gather_model, random_placement, whole_model_outputs

M = 3


def stages(graph, p: int = 2) -> Placement:
    """The nodes in topological order cut into `p` contiguous stages."""
    nodes = list(graph.nodes)
    return Placement([f"cpu:{s}" for s in range(p)], {n: f"cpu:{p * i // len(nodes)}" for i, n in enumerate(nodes)},
                     graph.sha256)


@pytest.mark.parametrize(("k", "seed"), [(2, 0), (2, 1), (3, 0), (3, 1)])
def test_each_micro_batch_gives_the_whole_models_outputs_for_its_inputs(k, seed):
    model = branches(3, depth=3, width=32, batch=8)
    graph = load_graph(model)
    feeds = [random_feeds(graph, seed=10 + j) for j in range(M)]
    with OrtPlacement(graph, random_placement(graph, k, seed), CPUS[:k], pipeline=Pipeline(M)) as placed:
        assert len({p.device for p in placed.partitions}) == k
        got = placed.run_arrays(feeds, timeout_s=10)
    assert sorted(got) == [f"y#{j}" for j in range(M)]
    for j in range(M):
        assert_same({"y": got[f"y#{j}"]}, whole_model_outputs(model, feeds[j]))


def test_a_zoo_model_pipelined_on_three_devices_gives_each_micro_batchs_outputs(zoo_file):
    path = zoo_file("nmt")
    graph = load_graph(path)
    feeds = [random_feeds(graph, seed=j) for j in range(M)]
    with OrtPlacement(graph, random_placement(graph, 3, 5), CPUS, pipeline=Pipeline(M)) as placed:
        got = placed.run_arrays(feeds, timeout_s=10)
    for j in range(M):
        expected = whole_model_outputs(path, feeds[j])
        assert_same({name: got[f"{name}#{j}"] for name in expected}, expected)


def test_device_0_runs_the_next_micro_batch_while_device_1_runs_this_one():
    graph = load_graph(branches(1, depth=6, width=256, batch=128))
    feeds = random_feeds(graph, seed=0)
    with OrtPlacement(graph, stages(graph), CPUS[:2], pipeline=Pipeline(4)) as placed:
        for _ in range(3):   # a busy machine may serialise one step; not three
            placed.run(feeds, timeout_s=10)
            ran = {(i.device, i.micro_batch): i for i in placed.engine.spans}
            overlaps = [k for k in range(3) if ran["cpu:0", k + 1].start < ran["cpu:1", k].end
                        and ran["cpu:1", k].start < ran["cpu:0", k + 1].end]
            if overlaps:
                break
    assert len(ran) == 8 and overlaps
    # each device in micro-batch order, and stage 1 never before stage 0 has made its input
    for k in range(4):
        assert ran["cpu:1", k].start >= ran["cpu:0", k].end
        assert k == 0 or ran["cpu:0", k].start >= ran["cpu:0", k - 1].end


def test_a_hand_over_is_dropped_once_its_last_reader_has_run(monkeypatch):
    """Only the micro-batches in flight hold their hand-overs (as the accounted memory assumes);
    the outputs stay to the end of the step."""
    graph = load_graph(branches(1, depth=2, width=16, batch=4))
    made = {}
    run_piece = engine._run_piece

    def recording(piece, inputs):
        values = run_piece(piece, inputs)
        made.update({(piece.name, len(made)): weakref.ref(v) for v in values})
        return values

    monkeypatch.setattr(engine, "_run_piece", recording)
    with OrtPlacement(graph, stages(graph), CPUS[:2], pipeline=Pipeline(M)) as placed:
        outputs = placed.run(random_feeds(graph, seed=0), timeout_s=10)
        assert len(outputs) == M and len(made) == 2 * M
        assert all(ref() is None for (piece, _), ref in made.items() if piece == "partition 0")
        assert all(ref() is not None for (piece, _), ref in made.items() if piece == "partition 1")


def test_memory_counts_the_micro_batches_in_flight_as_the_torch_engine_does():
    graph = load_graph(branches(1, depth=4, width=64, batch=16))
    placement = stages(graph)
    peaks = []
    for m in (1, 2, 4):
        with OrtPlacement(graph, placement, CPUS[:2], pipeline=Pipeline(m)) as placed:
            torch_engine = accounted_memory(graph, placement, CPUS[:2], pipeline=Pipeline(m))
            assert placed.peak_memory == {d: e.peak for d, e in torch_engine.items()}
            peaks.append(placed.peak_memory)
    assert all(a[d] < b[d] for a, b in zip(peaks, peaks[1:]) for d in a)


def test_one_micro_batch_is_the_plain_step():
    graph = load_graph(branches(2, depth=2, width=32, batch=8))
    placement, feeds = random_placement(graph, 2, 0), random_feeds(graph, seed=0)
    with OrtPlacement(graph, placement, CPUS[:2]) as plain, \
            OrtPlacement(graph, placement, CPUS[:2], pipeline=Pipeline(1)) as one:
        assert_same(one.run_arrays(feeds, timeout_s=10), plain.run_arrays(feeds, timeout_s=10))
        assert one.peak_memory == plain.peak_memory
        assert {i.micro_batch for i in one.engine.spans} == {0}
    record = RealMeasurer(graph, CPUS[:2], pipeline=Pipeline(1), engine="onnxruntime").protocol_record()
    assert "micro_batches" not in record


def test_a_pipelined_step_is_measured_whole_and_records_its_micro_batches():
    graph = load_graph(branches(2, depth=2, width=32, batch=8))
    measurer = measurer_for("onnxruntime", graph, CPUS[:2], MeasureProtocol(warmup=1, repeats=3, timeout_s=10),
                            pipeline=Pipeline(4))
    m = measurer.measure(random_placement(graph, 2, 0))
    assert m.ok and m.step_time > 0 and m.protocol["micro_batches"] == 4 and m.protocol["engine"] == "onnxruntime"


def test_a_failing_micro_batch_fails_the_step_and_the_engine_runs_again():
    model = gather_model()
    graph = load_graph(model)
    placement = Placement(["cpu:0", "cpu:1"], {"embed": "cpu:0", "t": "cpu:1"}, graph.sha256)
    good, bad = {"ids": np.array([1, 2, 3])}, {"ids": np.array([1, 2, 99])}
    with OrtPlacement(graph, placement, CPUS[:2], pipeline=Pipeline(M)) as placed:
        with pytest.raises(KernelError, match="partition 0 failed on cpu:0"):
            placed.run([good, bad, good], timeout_s=10)
        got = placed.run_arrays([good] * M, timeout_s=10)
        assert_same({"y": got["y#2"]}, whole_model_outputs(model, good))
    m = RealMeasurer(graph, CPUS[:2], MeasureProtocol(warmup=0, repeats=1, timeout_s=10), feeds=bad,
                    pipeline=Pipeline(M), engine="onnxruntime").measure(placement)
    assert not m.ok and m.failure == "kernel_error" and "partition 0" in m.reason


def test_a_pipelined_step_over_its_time_limit_is_a_timeout():
    graph = load_graph(branches(2, depth=8, width=512, batch=256))
    m = RealMeasurer(graph, CPUS[:2], MeasureProtocol(warmup=0, repeats=1, timeout_s=0.001),
                    pipeline=Pipeline(4), engine="onnxruntime").measure(random_placement(graph, 2, 0))
    assert not m.ok and m.failure == "timeout"
