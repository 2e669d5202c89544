"""Peak memory accounted from tensor lifetimes under a placement's schedule."""

from __future__ import annotations

import pytest

from placer.graph.load import load_graph
from placer.engines.torch.executor import accounted_memory
from placer.program.memory import predict_peak_memory
from placer.program.training import OptimizerSpec, TrainingSpec, trained_parameters
from placer.program.schedule import build_schedule
from placer.program.walk import Step
from placer.placement import Placement
from testgraphs import branches

SIZES = {"x": 100, "w": 1000, "a": 10, "b": 20, "c": 40, "y": 5}


def _steps() -> list[Step]:
    # x -> A(w) -> a ; a -> B -> b ; a, b -> C -> c ; c -> D -> y
    return [Step("A", "Conv", ("x", "w"), ("a",)), Step("B", "Relu", ("a",), ("b",)),
            Step("C", "Add", ("a", "b"), ("c",)), Step("D", "Relu", ("c",), ("y",))]


def _peaks(assignment: dict[str, str], devices: list[str]):
    schedule = build_schedule(_steps(), assignment, devices, consts={"w"}, feeds={"x"}, outputs=["y"])
    return schedule, predict_peak_memory(schedule, SIZES.__getitem__)


def test_single_device_peak_is_the_largest_live_set_plus_parameters():
    _, peaks = _peaks(dict.fromkeys("ABCD", "cpu:0"), ["cpu:0"])
    # live sets: A: x+a=110 (x freed after) ; B: a+b=30 ; C: a+b+c=70 ; D: c+y=45
    assert peaks["cpu:0"].resident == 1000
    assert peaks["cpu:0"].peak == 1000 + 110
    assert peaks["cpu:0"].peak_step == "A"


def test_received_tensors_count_on_the_destination_from_first_to_last_use():
    schedule, peaks = _peaks({"A": "cpu:0", "B": "cpu:1", "C": "cpu:0", "D": "cpu:1"}, ["cpu:0", "cpu:1"])
    assert ("a", "cpu:0", "cpu:1") in schedule.crossings and ("c", "cpu:0", "cpu:1") in schedule.crossings
    # cpu:0: A: x+a=110 ; C: recv b (20) + a + c = 70 -> peak 1110 with the weight
    assert peaks["cpu:0"].peak == 1110
    # cpu:1: B: recv a + b = 30, a and b dropped ; D: recv c + y = 45
    assert peaks["cpu:1"].resident == 0 and peaks["cpu:1"].peak == 45


def test_graph_outputs_stay_alive_and_other_tensors_are_freed():
    schedule, _ = _peaks(dict.fromkeys("ABCD", "cpu:0"), ["cpu:0"])
    frees = [t for step_frees in schedule.per_device["cpu:0"].frees for t in step_frees]
    assert sorted(frees) == ["a", "b", "c", "x"]
    assert schedule.per_device["cpu:0"].outputs == ["y"]


def test_reading_a_tensor_nobody_produced_is_refused():
    with pytest.raises(ValueError, match="reads 'ghost'"):
        build_schedule([Step("A", "Relu", ("ghost",), ("a",))], {"A": "cpu"}, ["cpu"], set(), set(), ["a"])


def test_an_output_only_read_elsewhere_is_dropped_after_publishing():
    schedule, _ = _peaks({"A": "cpu:0", "B": "cpu:1", "C": "cpu:1", "D": "cpu:1"}, ["cpu:0", "cpu:1"])
    cpu0 = schedule.per_device["cpu:0"]
    assert cpu0.publish[0] == ["a"] and "a" in cpu0.frees[0]


def test_held_bytes_are_resident_on_their_own_device_for_the_whole_step():
    schedule, plain = _peaks({"A": "cpu:0", "B": "cpu:1", "C": "cpu:0", "D": "cpu:1"}, ["cpu:0", "cpu:1"])
    held = predict_peak_memory(schedule, SIZES.__getitem__, {"cpu:0": 300})
    assert (held["cpu:0"].resident, held["cpu:0"].peak) == (plain["cpu:0"].resident + 300, plain["cpu:0"].peak + 300)
    assert held["cpu:1"] == plain["cpu:1"]


def test_a_received_updated_parameter_is_a_full_copy_freed_after_its_refresh():
    """updated:w is w itself on its owner (no bytes there) and a copy of w where it is sent, alive
    until that device's refresh has copied it in."""
    steps = [Step("A", "Conv", ("x", "w"), ("a",)), Step("update:w", "update", ("w", "a"), ("updated:w",)),
             Step("refresh:w@cpu:1", "refresh", ("w", "updated:w"), ()), Step("D", "Relu", ("x",), ("y",))]
    where = {"A": "cpu:0", "update:w": "cpu:0", "refresh:w@cpu:1": "cpu:1", "D": "cpu:1"}
    schedule = build_schedule(steps, where, ["cpu:0", "cpu:1"], consts={"w"}, feeds={"x"}, outputs=["y"])
    size = {**SIZES, "updated:w": 0}.__getitem__
    peaks = predict_peak_memory(schedule, size, received=lambda t: SIZES[t.removeprefix("updated:")])
    assert (peaks["cpu:0"].peak, peaks["cpu:0"].peak_step) == (1000 + 110, "A")
    # cpu:1: w and x resident and live, then the copy of w; after the refresh only y joins them
    assert (peaks["cpu:1"].peak, peaks["cpu:1"].peak_step) == (1000 + 100 + 1000, "refresh:w@cpu:1")
    assert predict_peak_memory(schedule, size)["cpu:1"].peak == 1000 + 100 + 5


@pytest.mark.parametrize("optimizer, copies", [(OptimizerSpec(momentum=0.0), 0), (OptimizerSpec(), 1),
                                               (OptimizerSpec("adam"), 2)])
def test_a_training_step_accounts_its_optimizer_state_per_parameter(optimizer, copies):
    """The executor's accounting holds the optimizer's state of every trained parameter: none for
    plain SGD, a momentum copy, Adam's two moments."""
    graph = load_graph(branches(2, 1))
    single = Placement.single_device(list(graph.nodes), "cpu", devices=["cpu"])
    params = sum(graph.tensors[p].nbytes for p in trained_parameters(graph))
    stateless = accounted_memory(graph, single, training=TrainingSpec(optimizer=OptimizerSpec(momentum=0.0)))
    with_state = accounted_memory(graph, single, training=TrainingSpec(optimizer=optimizer))
    assert params > 0
    assert with_state["cpu"].resident == stateless["cpu"].resident + copies * params
    assert with_state["cpu"].peak == stateless["cpu"].peak + copies * params
