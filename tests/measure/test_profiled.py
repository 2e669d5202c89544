import math
from dataclasses import replace

import pytest

from placer.devices import parse_devices
import placer.costmodel.profile_cache as profile_module
from placer.costmodel.lower_bound import lower_bound
from placer.measure.measurer import MeasureProtocol
from placer.costmodel.profiled import ProfiledCostModel
from placer.costmodel.profile_cache import cache_key, profiled_cost_model
from placer.costmodel.simulator import SimulatedMeasurer, Simulator
from placer.placement import Placement

DEVICES = "cpu:0[threads=1],cpu:1[threads=1]"
QUICK = MeasureProtocol(warmup=0, repeats=1)


@pytest.fixture
def profiled(branchy, tmp_path):
    _, graph = branchy
    return graph, profiled_cost_model(graph, parse_devices(DEVICES), cache_dir=tmp_path, protocol=QUICK)


def test_every_node_gets_a_measured_time_on_every_device(profiled):
    graph, cost = profiled
    folded = set(cost.profile.folded_nodes)
    assert cost.devices == ["cpu:0", "cpu:1"] and not cost.from_cache and cost.path.is_file()
    for name, node in graph.nodes.items():
        for d in cost.devices:
            t = cost.op_time(node, d)
            assert t == 0.0 if name in folded else (math.isfinite(t) and t > 0)
    assert cost.transfer_time(4096, "cpu:0", "cpu:0") == 0.0
    assert 0 < cost.transfer_time(4096, "cpu:0", "cpu:1") < math.inf


def test_a_second_request_reads_the_cached_profile_without_running_anything(profiled, tmp_path, monkeypatch):
    graph, first = profiled

    def no_profiling(*args, **kwargs):
        raise AssertionError("profiled again instead of reading the cache")

    monkeypatch.setattr(profile_module, "profile_graph", no_profiling)
    again = profiled_cost_model(graph, parse_devices(DEVICES), cache_dir=tmp_path)
    assert again.from_cache and again.profile.op_times == first.profile.op_times


def test_the_cache_key_changes_with_the_device_classes_not_their_indices_or_order(branchy):
    _, graph = branchy
    key = cache_key(graph, parse_devices(DEVICES))
    for other in ("cpu:0[threads=2],cpu:1[threads=2]", "cpu:0[threads=1],cpu:1[threads=2]", "cpu:0[threads=1]"):
        assert cache_key(graph, parse_devices(other)) != key, other
    for same in (DEVICES, "cpu:3[threads=1],cpu:1[threads=1]", ",".join(f"cpu:{i}[threads=1]" for i in range(4))):
        assert cache_key(graph, parse_devices(same)) == key, same


def test_the_cache_key_records_the_objective_with_its_loss_and_optimizer(branchy, tmp_path):
    from placer.program.training import Loss, OptimizerSpec, TrainingSpec

    _, graph = branchy
    devices = parse_devices(DEVICES)
    keys = {cache_key(graph, devices), cache_key(graph, devices, TrainingSpec()),
            cache_key(graph, devices, TrainingSpec(optimizer=OptimizerSpec("adam"))),
            cache_key(graph, devices, TrainingSpec(loss=Loss("cross_entropy")))}
    assert len(keys) == 4
    cost = profiled_cost_model(graph, devices, cache_dir=tmp_path, protocol=QUICK, training=TrainingSpec())
    assert cost.profile.objective == "training" and "update:fc" in cost.profile.op_times
    assert cost.path.name == f"{cache_key(graph, devices, TrainingSpec())}.json"
    again = profiled_cost_model(graph, devices, cache_dir=tmp_path, training=TrainingSpec())
    assert again.from_cache and again.profile.op_times == cost.profile.op_times
    # a protocol of the training objective without a spec: the default loss and optimizer
    same = profiled_cost_model(graph, devices, cache_dir=tmp_path, protocol=replace(QUICK, objective="training"))
    assert same.from_cache and same.path == cost.path


def test_a_profile_cached_for_two_identical_devices_serves_four(profiled, tmp_path, monkeypatch):
    graph, first = profiled
    monkeypatch.setattr(profile_module, "profile_graph", lambda *a, **k: pytest.fail("profiled again"))
    four = [f"cpu:{i}" for i in range(4)]
    again = profiled_cost_model(graph, parse_devices([f"{d}[threads=1]" for d in four]), cache_dir=tmp_path)
    assert again.from_cache and again.devices == four
    assert all(per == dict.fromkeys(four, per["cpu:0"]) for per in again.profile.op_times.values())
    assert again.profile.step_times == dict.fromkeys(four, first.profile.step_times["cpu:0"])
    link = first.transfer_time(4096, "cpu:0", "cpu:1")
    assert [again.transfer_time(4096, a, b) for a in four for b in four if a != b] == [link] * 12


def test_a_corrupt_cache_file_is_measured_again(profiled, tmp_path):
    graph, first = profiled
    first.path.write_text("{ not json")
    again = profiled_cost_model(graph, parse_devices(DEVICES), cache_dir=tmp_path, protocol=QUICK)
    assert not again.from_cache and set(again.profile.op_times) == set(graph.nodes)


def test_the_profiled_costs_drive_the_simulator_and_bound_it_from_below(profiled):
    graph, cost = profiled
    sim = Simulator(graph, cost.devices, cost)
    bound = lower_bound(graph, cost.devices, cost).value
    for assign in ([0] * len(graph.nodes), [i % 2 for i in range(len(graph.nodes))]):
        step = sim.simulate(assign).step_time
        assert math.isfinite(step) and step >= bound * (1 - 1e-9)


def test_memory_caps_neither_stop_the_profiling_nor_change_the_cache_key(branchy, tmp_path):
    _, graph = branchy
    capped = parse_devices("cpu:0[threads=1,mem=1KiB],cpu:1[threads=1,mem=1KiB]")
    cost = profiled_cost_model(graph, capped, cache_dir=tmp_path, protocol=QUICK)
    assert not cost.profile.failures
    assert cost.path.name == f"{cache_key(graph, parse_devices(DEVICES))}.json"


def _measured_single(cost, device):
    return cost.profile.calibration["single_step_times"][cost.profile.protocol["classes"][device]]


def test_calibration_makes_a_simulated_single_device_step_match_the_measured_one(profiled):
    graph, cost = profiled
    for i, d in enumerate(cost.devices):
        step = Simulator(graph, cost.devices, cost).simulate([i] * len(graph.nodes)).step_time
        assert step == pytest.approx(_measured_single(cost, d), rel=1e-6)
    # without a calibration, the profiled whole-graph step (or the nodes' sum, when longer)
    bare = ProfiledCostModel(replace(cost.profile, calibration={}))
    for i, d in enumerate(cost.devices):
        step = Simulator(graph, cost.devices, bare).simulate([i] * len(graph.nodes)).step_time
        raw = ProfiledCostModel(cost.profile, calibrate=False)
        raw_step = Simulator(graph, cost.devices, raw).simulate([i] * len(graph.nodes)).step_time
        assert step == pytest.approx(max(cost.profile.step_times[d], raw_step), rel=1e-6)


def test_the_simulator_predicts_the_same_single_device_step_on_identical_devices(profiled):
    graph, cost = profiled
    measurer = SimulatedMeasurer(graph, parse_devices(DEVICES), cost)
    steps = [measurer.measure(Placement.single_device(list(graph.nodes), d, graph.sha256, cost.devices)).step_time
             for d in cost.devices]
    assert steps[0] == steps[1] and math.isfinite(steps[0])


def test_a_training_profile_drives_the_training_simulator_and_its_lower_bound(branchy, tmp_path):
    from placer.program.training import TrainingSpec

    _, graph = branchy
    cost = profiled_cost_model(graph, parse_devices(DEVICES), cache_dir=tmp_path, protocol=QUICK,
                                       training=TrainingSpec())
    sim = Simulator(graph, cost.devices, cost, training=TrainingSpec())
    bound = lower_bound(graph, cost.devices, cost, TrainingSpec()).value
    for i, d in enumerate(cost.devices):
        step = sim.simulate([i] * len(graph.nodes)).step_time
        assert step == pytest.approx(_measured_single(cost, d), rel=1e-6)
        assert step >= bound * (1 - 1e-9)
