"""Per-node profile: every op timed on every device, transfers between every pair of devices."""

from __future__ import annotations

import json
import math

from placer.measure.measurer import MeasureProtocol
from placer.measure.profile import Profile, TransferStat, profile_graph


def test_every_node_is_timed_on_every_device_and_folded_nodes_cost_nothing(branchy):
    _, graph = branchy
    profile = profile_graph(graph, ["cpu:0", "cpu:1"], protocol=MeasureProtocol(warmup=1, repeats=2),
                            transfer_sizes=(4096,))
    assert profile.devices == ["cpu:0", "cpu:1"] and profile.graph_sha256 == graph.sha256
    assert set(profile.op_times) == set(graph.nodes)
    for node, per_device in profile.op_times.items():
        assert set(per_device) == {"cpu:0", "cpu:1"}
        if node in profile.folded_nodes:
            assert per_device == {"cpu:0": 0.0, "cpu:1": 0.0}
        else:
            assert all(0 < t < math.inf for t in per_device.values())
    assert "shape" in profile.folded_nodes
    assert set(profile.step_times) == {"cpu:0", "cpu:1"} and not profile.failures
    pairs = {(t.src, t.dst) for t in profile.transfers}
    assert pairs == {("cpu:0", "cpu:1"), ("cpu:1", "cpu:0")}
    # virtual CPU devices share memory: a hand-over latency, no bandwidth term
    assert all(t.bandwidth_Bps is None and 0 < t.latency_s < 1 for t in profile.transfers)
    assert profile.transfer_time(10**6, "cpu:0", "cpu:0") == 0.0
    assert profile.transfer_time(10**6, "cpu:0", "cpu:1") == profile.transfer_time(1, "cpu:0", "cpu:1")


def test_profile_round_trips_through_json(tmp_path):
    profile = Profile(devices=["cpu:0", "cuda:0"], op_times={"n": {"cpu:0": 0.5, "cuda:0": math.inf}},
                      transfers=[TransferStat("cpu:0", "cuda:0", 1e-5, 1e10)], graph_sha256="abc",
                      failures={"cuda:0": "oom: too big"})
    path = tmp_path / "profile.json"
    profile.save(path)
    assert json.loads(path.read_text())["op_times"]["n"]["cuda:0"] is None
    back = Profile.load(path)
    assert back == profile
    assert back.transfer_time(10**10, "cpu:0", "cuda:0") == 1e-5 + 1.0
    assert back.op_time("n", "cuda:0") == math.inf and back.op_time("missing", "cpu:0") == math.inf


def test_capped_device_failure_is_recorded_not_raised(branchy):
    _, graph = branchy
    profile = profile_graph(graph, ["cpu:0[mem=1KiB]", "cpu:1"], protocol=MeasureProtocol(warmup=0, repeats=1),
                            transfer_sizes=(4096,))
    assert profile.failures["cpu:0"].startswith("oom")
    assert all(math.isinf(per["cpu:0"]) for n, per in profile.op_times.items() if n not in profile.folded_nodes)
    assert "cpu:1" in profile.step_times
