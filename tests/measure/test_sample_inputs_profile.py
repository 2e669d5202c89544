"""The profile and every measured step are fed the graph's sample inputs (--inputs): an If is
timed on the branch they take, and a profile taken on other inputs is not reused from the cache."""

from __future__ import annotations

import numpy as np
import pytest

from controlflow import export_rate_gate, rate_inputs
from placer.costmodel.profile_cache import cache_key, profiled_cost_model
from placer.costmodel.profiler import profile_graph
from placer.devices import parse_devices
from placer.kernels.loading import load_graph
from placer.measure.measurer import MeasureProtocol, RealMeasurer
from placer.placement import Placement

DEVICES = parse_devices("cpu:0[threads=1],cpu:1[threads=1]")
QUICK = MeasureProtocol(warmup=0, repeats=1)


@pytest.fixture(scope="module")
def rate_gate(tmp_path_factory):
    return export_rate_gate(tmp_path_factory.mktemp("rate") / "vad.onnx")


@pytest.mark.parametrize("sr, branch", [(16000, "then branch"), (8000, "else branch")])
def test_the_profile_times_the_branch_the_sample_inputs_take(rate_gate, sr, branch):
    graph = load_graph(rate_gate, inputs={"sr": np.array(sr)})
    profile = profile_graph(graph, DEVICES[:1], protocol=QUICK, settle=None)
    assert not profile.failures and list(profile.control_flow["/If"]) == [branch]   # every run took it


def test_a_measured_step_is_fed_the_sample_inputs(rate_gate):
    graph = load_graph(rate_gate, inputs={"sr": np.array(8000)})
    measured = RealMeasurer(graph, DEVICES[:1], QUICK).measure(Placement.single_device(list(graph.nodes), "cpu:0"))
    assert measured.ok, measured.reason


def test_a_profile_on_other_inputs_is_not_read_from_the_cache(rate_gate, tmp_path):
    first, other, same = (load_graph(rate_gate, inputs=rate_inputs(sr, seed)) for sr, seed in
                          ((16000, 0), (16000, 1), (16000, 0)))
    keys = [cache_key(g, DEVICES) for g in (first, other, same)]
    assert keys[0] != keys[1] and keys[0] == keys[2]
    assert cache_key(first, DEVICES, feeds=rate_inputs(16000, 1)) == keys[1]   # feeds override them, and count
    taken = profiled_cost_model(first, DEVICES, cache_dir=tmp_path, protocol=QUICK, calibration=None)
    assert not taken.from_cache
    assert not profiled_cost_model(other, DEVICES, cache_dir=tmp_path, protocol=QUICK, calibration=None).from_cache
    again = profiled_cost_model(same, DEVICES, cache_dir=tmp_path, protocol=QUICK, calibration=None)
    assert again.from_cache and again.path == taken.path
