"""Per-node profile: every op timed on every class of identical devices, transfers between every pair."""

from __future__ import annotations

import json
import math

from dataclasses import replace

import placer.costmodel.profiler as profiler_module
import placer.engines.torch.engine as torch_engine
from placer.measure.measurer import MeasureProtocol
from placer.costmodel.profile import Profile, TransferStat
from placer.costmodel.profiler import profile_graph


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


def test_identical_devices_share_one_profile_and_a_different_one_gets_its_own(branchy):
    _, graph = branchy
    profile = profile_graph(graph, ["cpu:0[threads=1]", "cpu:1[threads=1]", "cpu:2[threads=2]"],
                            protocol=MeasureProtocol(warmup=0, repeats=2), transfer_sizes=(4096,))
    assert profile.protocol["classes"] == {"cpu:0": "cpu[threads=1]", "cpu:1": "cpu[threads=1]",
                                           "cpu:2": "cpu[threads=2]"}
    times = {d: {n: per[d] for n, per in profile.op_times.items()} for d in profile.devices}
    assert times["cpu:0"] == times["cpu:1"] != times["cpu:2"]
    assert profile.step_times["cpu:0"] == profile.step_times["cpu:1"] != profile.step_times["cpu:2"]
    fit = {(t.src, t.dst): replace(t, src="", dst="") for t in profile.transfers}
    assert len(fit) == 6 and fit["cpu:0", "cpu:1"] == fit["cpu:1", "cpu:0"]
    assert fit["cpu:0", "cpu:2"] == fit["cpu:1", "cpu:2"] and fit["cpu:2", "cpu:0"] == fit["cpu:2", "cpu:1"]


def test_rounds_alternate_between_identical_devices_and_the_median_takes_every_round(branchy, monkeypatch):
    _, graph = branchy
    runs, fake = [], iter([100.0, 100.0, 1.0, 9.0, 2.0, 8.0])   # node times of each run: warm-ups first

    class Spy(torch_engine.PlacedExecutor):
        def run(self, feeds, timeout_s=None, profile=None):
            outputs = super().run(feeds, timeout_s=timeout_s, profile=profile)
            if profile is not None:   # the node-timed runs; each round also runs the whole step alone
                runs.append(set(self.assignment.values()).pop())
                profile.node_times = dict.fromkeys(profile.node_times, next(fake))
            return outputs

    monkeypatch.setattr(torch_engine, "PlacedExecutor", Spy)
    profile = profile_graph(graph, ["cpu:0", "cpu:1"], protocol=MeasureProtocol(warmup=1, repeats=4),
                            transfer_sizes=(4096,), settle=None)
    assert runs == ["cpu:0", "cpu:1"] * 3   # a warm-up on each, then the timed rounds in turn
    # the median of the four timed rounds (5), not of one device's (1.5 or 8.5), nor of the warm-ups
    assert profile.op_times["add"] == {"cpu:0": 5.0, "cpu:1": 5.0}


def test_a_training_profile_times_every_backward_and_update_step(branchy):
    from placer.program.training import OptimizerSpec, TrainingSpec

    _, graph = branchy
    profile = profile_graph(graph, ["cpu:0", "cpu:1"], transfer_sizes=(4096,),
                            protocol=MeasureProtocol(warmup=0, repeats=2, objective="training"),
                            training=TrainingSpec(optimizer=OptimizerSpec("adam")))
    assert profile.objective == "training" and profile.protocol["optimizer"] == "adam"
    steps = set(profile.op_times)
    assert set(graph.nodes) < steps
    # a backward for each node on the gradient path, none for the shape subgraph; an update per parameter
    assert {"backward:conv_a", "backward:relu_a", "backward:head", "backward:softmax"} <= steps
    assert not any(s.startswith("backward:") and s.split(":", 1)[1] in profile.folded_nodes for s in steps)
    assert {f"update:{p}" for p in ("w1", "b1", "w2", "w3", "fc")} <= steps
    assert {"loss:probs", "loss:a_relu"} <= steps
    for step in steps - set(profile.folded_nodes):
        assert all(0 < t < math.inf for t in profile.op_times[step].values()), step
    inference = profile_graph(graph, ["cpu:0"], protocol=MeasureProtocol(warmup=0, repeats=2),
                              transfer_sizes=(4096,))
    assert inference.objective == "inference" and not any(":" in s for s in inference.op_times)


def _fake_node_times(monkeypatch, values):
    """Every profiled run reports each node at the next of `values` (warm-ups included)."""
    fake = iter(values)

    class Fake(torch_engine.PlacedExecutor):
        def run(self, feeds, timeout_s=None, profile=None):
            outputs = super().run(feeds, timeout_s=timeout_s, profile=profile)
            if profile is not None:
                profile.node_times = dict.fromkeys(profile.node_times, next(fake))
            return outputs

    monkeypatch.setattr(torch_engine, "PlacedExecutor", Fake)
    monkeypatch.setattr(profiler_module.time, "perf_counter", _clock())


def _clock():
    """A fake clock: every reading half a second later, so every whole step takes the same time."""
    now = [0.0]

    def tick():
        now[0] += 0.5
        return now[0]
    return tick


def test_rounds_go_on_until_the_medians_settle_and_the_profile_records_how_many(branchy, monkeypatch):
    from placer.costmodel.profile import Settle

    _, graph = branchy
    # noisy first rounds, then steady: the median of the node sum settles after a few more rounds
    _fake_node_times(monkeypatch, [1.0] + [9.0, 1.0, 7.0] + [2.0] * 30)
    profile = profile_graph(graph, ["cpu:0"], protocol=MeasureProtocol(warmup=1, repeats=3), transfer_sizes=(4096,),
                            settle=Settle(tolerance=0.02, window=2, max_rounds=20, max_seconds=1e9))
    [record] = profile.protocol["rounds"].values()
    assert record["settled"] and 3 < record["rounds"] < 20
    assert profile.op_times["add"]["cpu:0"] == 2.0


def test_a_profile_that_never_settles_stops_at_the_cap_and_says_so(branchy, monkeypatch):
    from placer.costmodel.profile import Settle

    _, graph = branchy
    _fake_node_times(monkeypatch, [1.0] + [float(i) for i in range(1, 40)])   # a steady climb
    profile = profile_graph(graph, ["cpu:0"], protocol=MeasureProtocol(warmup=1, repeats=3), transfer_sizes=(4096,),
                            settle=Settle(tolerance=0.02, window=2, max_rounds=7, max_seconds=1e9))
    assert list(profile.protocol["rounds"].values()) == [{"rounds": 7, "settled": False}]


def test_the_whole_graph_step_is_timed_without_timing_each_node(branchy, monkeypatch):
    _, graph = branchy
    calls = []

    class Spy(torch_engine.PlacedExecutor):
        def run(self, feeds, timeout_s=None, profile=None):
            calls.append(profile is not None)
            outputs = super().run(feeds, timeout_s=timeout_s, profile=profile)
            if profile is None:   # the untimed runs are what the whole step is made of: a sleep far past the
                time.sleep(0.5)   # graph's ops (ms; 0.11 s summed with four test processes on 2 cores)
            return outputs

    import time

    monkeypatch.setattr(torch_engine, "PlacedExecutor", Spy)
    profile = profile_graph(graph, ["cpu:0"], protocol=MeasureProtocol(warmup=1, repeats=3), transfer_sizes=(4096,),
                            settle=None)
    assert calls == [True, False] * 4   # a warm-up of each kind, then each round node-timed and whole
    assert profile.step_times["cpu:0"] >= 0.5 > sum(profile.op_times[n]["cpu:0"] for n in graph.nodes)
