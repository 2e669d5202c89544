"""The pool of measuring actors: the same figures as one measurer, in order, and faults absorbed."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from testworkers import DEVICES, SimSpec
from placer.errors import PlacerError
from placer.costmodel.simulator import SimulatedMeasurer
from placer.placement import Placement
from placer.workers import NoWorkersLeft, RayMeasurer
from placer.workers.ownership import split_cores


def random_placements(graph, n: int, seed: int = 0) -> list[Placement]:
    rng = np.random.default_rng(seed)
    return [Placement(list(DEVICES), {name: DEVICES[rng.integers(2)] for name in graph.nodes}) for _ in range(n)]


@pytest.fixture(scope="module")
def pool(graph):
    """Three healthy workers, for the tests that lose none."""
    with RayMeasurer(SimSpec(DEVICES, graph=graph), workers=3) as pool:
        yield pool


def test_the_pool_gives_exactly_the_measurements_of_one_measurer_in_input_order(graph, pool):
    placements = random_placements(graph, 12)
    plain = SimulatedMeasurer(graph, DEVICES)
    got = pool.measure_many(placements)
    report = pool.report()
    assert [m.to_dict() for m in got] == [plain.measure(p).to_dict() for p in placements]
    assert len({m.step_time for m in got}) > 3          # distinct figures: the order is checked
    assert report["measured"] == 12 and report["retried"] == 0 and report["workers_alive"] == 3


def test_a_worker_killed_mid_batch_loses_nothing_and_counts_one_retry(graph, faulty):
    """ray.kill of the worker busy with the 4th placement: the batch completes on the others,
    that placement measured once more, nothing doubled."""
    spec = faulty("hang", at=3)
    counter = Path(spec.counter_dir)
    placements = random_placements(graph, 10)
    with RayMeasurer(spec, workers=3) as pool:
        pids = {w.name: w.pid for w in pool.workers.values()}

        def kill_the_hanging_worker() -> None:
            while not (counter / "hanging").exists():
                time.sleep(0.05)
            pid = int((counter / "hanging").read_text())
            name = next(n for n, p in pids.items() if p == pid)
            pool._ray.kill(pool.workers[name].actor)

        killer = threading.Thread(target=kill_the_hanging_worker)
        killer.start()
        got = pool.measure_many(placements)
        killer.join()
        report = pool.report()
    assert [m.to_dict() for m in got] == [SimulatedMeasurer(graph, DEVICES).measure(p).to_dict() for p in placements]
    assert report["retried"] == 1 and report["measured"] == 10 and report["workers_alive"] == 2
    assert [r["worker"] for r in report["lost"]] == [name for name, pid in pids.items()
                                                      if pid == int((counter / "hanging").read_text())]
    assert len(list(counter.glob("measured-*"))) == 11      # ten placements, one of them twice


def test_a_worker_that_hangs_past_the_timeout_is_dropped_and_its_placement_measured_elsewhere(graph, faulty):
    spec = faulty("hang", at=1)
    spec.timeout_s = 1.0
    placements = random_placements(graph, 5)
    with RayMeasurer(spec, workers=2) as pool:
        started = time.monotonic()
        got = pool.measure_many(placements)
        took = time.monotonic() - started
        report = pool.report()
    assert all(m is not None and m.ok for m in got) and took < 10
    assert report["retried"] == 1 and len(report["lost"]) == 1 and "hung" in report["lost"][0]["reason"]


def test_no_worker_left_is_a_clear_error(graph, faulty):
    with RayMeasurer(faulty("die_always", at=2), workers=2) as pool:
        with pytest.raises(NoWorkersLeft, match="no worker is left.*--resume") as error:
            pool.measure_many(random_placements(graph, 6))
        assert len(pool.report()["lost"]) == 2
    assert isinstance(error.value, PlacerError) and "\n" not in str(error.value)


def test_a_worker_whose_devices_differ_is_refused_with_the_reason(graph, faulty):
    with RayMeasurer(faulty(odd_out=True), workers=3) as pool:
        report = pool.report()
        assert pool.measure_many(random_placements(graph, 2))[0].ok
    assert report["workers"] == 2 and len(report["refused"]) == 1
    assert report["refused"][0]["reason"] == "its simulator is 'different', the other workers' 'alike'"


def test_workers_that_need_cores_are_pinned_to_their_own(graph):
    with RayMeasurer(SimSpec(DEVICES, graph=graph, cores=1), workers=2) as pool:
        pinned = {w.name: os.sched_getaffinity(w.pid) for w in pool.workers.values()}
    assert sorted(map(sorted, pinned.values())) == [[0], [1]]


def test_cores_are_split_without_sharing_and_a_worker_left_without_is_refused():
    given, refused = split_cores({"10.0.0.1": ["w0", "w1", "w2"], "10.0.0.2": ["w3"]},
                                 {"10.0.0.1": [0, 1, 2, 3, 4], "10.0.0.2": [0, 1]}, per_worker=2)
    assert given == {"w0": [0, 1], "w1": [2, 3], "w3": [0, 1]}
    assert refused == {"w2": "its machine has no 2 free cores left (5 in all)"}


def test_more_workers_than_the_cluster_holds_is_refused_before_starting(graph):
    with pytest.raises(PlacerError, match="2 workers of 2 cores .* the cluster holds 1; use --workers 1"):
        RayMeasurer(SimSpec(DEVICES, graph=graph, cores=2), workers=2)


def test_calibration_names_the_worker_off_the_median():
    from placer.workers.outliers import off_median

    times = {"worker-0": {"cpu:0": 0.100, "cpu:1": 0.100}, "worker-1": {"cpu:0": 0.104, "cpu:1": 0.101},
             "worker-2": {"cpu:0": 0.115, "cpu:1": 0.099}, "worker-3": {"cpu:0": None, "cpu:1": 0.050}}
    assert off_median(times) == {"worker-2": "cpu:0 11% slower than the median (115.00 vs. 104.00 ms)",
                                 "worker-3": "cpu:1 50% faster than the median (50.00 vs. 99.50 ms)"}


def test_calibration_measures_every_single_device_placement_on_every_worker(graph, pool):
    singles = {d: Placement.single_device(list(graph.nodes), d, devices=DEVICES) for d in DEVICES}
    times = pool.calibrate(singles)
    expected = {d: SimulatedMeasurer(graph, DEVICES).measure(p).step_time for d, p in singles.items()}
    assert times == {f"worker-{i}": expected for i in range(3)} and pool.off_median == {}
    assert pool.report()["single_device_step_times"] == times


def test_workers_that_cannot_build_their_measurer_say_why(graph):
    with pytest.raises(NoWorkersLeft, match="no worker could start: worker-0 AttributeError: .*; worker-1 "):
        RayMeasurer(SimSpec(DEVICES, graph=None), workers=2)
