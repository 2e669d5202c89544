"""Virtual CPU devices do not trade cores: each worker thread is pinned to its own, the caller's
threads keep their mask, and a machine without enough cores is said once, not pinned."""

import logging
import os

import pytest

import placer.engines.affinity as affinity
from placer.devices import parse_devices
from placer.graph.load import load_graph
from placer.engines.torch.executor import PlacedExecutor
from placer.placement import Placement

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                                reason="needs Linux thread affinity and two cores")


@pytest.fixture
def graph(tmp_path):
    from testgraphs import branches

    import onnx

    onnx.save(branches(2, 2), tmp_path / "b.onnx")
    return load_graph(tmp_path / "b.onnx")


def _split(graph, devices):
    names = [d.name for d in devices]
    return Placement(devices=names, nodes={n: names[i % len(names)] for i, n in enumerate(graph.nodes)})


def test_each_virtual_device_worker_runs_on_its_own_core_and_the_caller_keeps_its_mask(graph):
    before = os.sched_getaffinity(0)
    devices = parse_devices("cpu:0[threads=1],cpu:1[threads=1]")
    with PlacedExecutor(graph, _split(graph, devices), devices) as ex:
        cores = ex.worker_cores()
        ex.run({i.name: __import__("numpy").zeros(i.shape, "float32") for i in graph.inputs})
    first, second = sorted(before)[:2]
    assert cores == {"cpu:0": [first], "cpu:1": [second]}
    assert os.sched_getaffinity(0) == before


def test_a_device_with_more_threads_owns_as_many_cores(graph):
    cores = sorted(os.sched_getaffinity(0))
    whole = parse_devices(f"cpu:0[threads={len(cores)}]")
    with PlacedExecutor(graph, _split(graph, whole), whole) as ex:
        assert ex.worker_cores() == {"cpu:0": cores}


def test_devices_wanting_more_cores_than_there_are_share_them_and_it_is_said_once(graph, caplog, monkeypatch):
    monkeypatch.setattr(affinity, "_warned", False)
    n = len(os.sched_getaffinity(0))
    devices = parse_devices(",".join(f"cpu:{k}[threads=1]" for k in range(n + 1)))
    with caplog.at_level(logging.WARNING, logger="placer.engines.affinity"):
        for _ in range(2):
            with PlacedExecutor(graph, _split(graph, devices), devices) as ex:
                assert all(c == sorted(os.sched_getaffinity(0)) for c in ex.worker_cores().values())
    said = [r for r in caplog.records if "share cores" in r.getMessage()]
    assert len(said) == 1
