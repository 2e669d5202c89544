"""The simulator and the lower bound model a whole training step: forward, loss, backward, update."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from placer.costmodel.protocol import own_link
from placer.errors import PlacerError
from placer.graph.load import load_graph
from placer.costmodel.lower_bound import lower_bound
from placer.costmodel.profile import Profile
from placer.costmodel.profiled import ProfiledCostModel
from placer.costmodel.sim_program import training_program
from placer.costmodel.simulator import (BACKWARD_FACTOR, AnalyticCostModel, SimulatedMeasurer, Simulator,
                                      simulate_batch)
from placer.program.training import Loss, OptimizerSpec, TrainingSpec
from placer.placement import Placement

from .test_simulator import ACT, WEIGHT, _model, _weight, chain, fork

DEVICES = ["cpu:0", "cpu:1", "cuda:0"]


def test_a_training_step_on_one_device_is_the_sum_of_its_steps_and_dearer_than_inference():
    g = load_graph(chain(3))
    cost = AnalyticCostModel(DEVICES)
    program = training_program(g, DEVICES, cost, TrainingSpec())
    names = [s.name for s in program.steps]
    assert names[:3] == ["mm0", "mm1", "mm2"] and names[3] == "loss:y2"
    assert names.index("backward:mm2") < names.index("backward:mm1") < names.index("backward:mm0")
    assert {"update:w0", "update:w1", "update:w2"} <= set(names)
    for node in ("mm0", "mm1", "mm2"):
        forward, backward = (program.times[names.index(s)] for s in (node, f"backward:{node}"))
        assert backward == [BACKWARD_FACTOR * t for t in forward]
    training = Simulator(g, DEVICES, cost, training=TrainingSpec())
    inference = Simulator(g, DEVICES, cost)
    for d in range(len(DEVICES)):
        step = training.simulate([d] * 3).step_time
        assert step == pytest.approx(sum(row[d] for row in program.times), rel=1e-12)
        assert step > (1 + BACKWARD_FACTOR) * inference.simulate([d] * 3).step_time


class OnlyTransfers(AnalyticCostModel):
    """Free steps, copies of 1 s + 1 ms per byte: a step's time is its chain of copies."""

    def op_time(self, node, device):
        return 0.0

    def training_step_time(self, step, kind, node, nbytes, device):
        return 0.0

    def transfer_time(self, nbytes, src, dst):
        return 0.0 if src == dst else 1.0 + nbytes * 1e-3

    def route(self, src, dst):
        return own_link(src, dst)


def test_gradients_cross_the_forward_edges_backwards():
    g = load_graph(chain(2))
    sim = Simulator(g, DEVICES, OnlyTransfers(DEVICES), training=TrainingSpec())
    assert sim.simulate([0, 0]).step_time == 0.0
    # y0 goes forward and grad:y0 (as many bytes) comes back, one after the other
    assert sim.simulate([0, 1]).step_time == pytest.approx(2 * (1.0 + ACT * 1e-3))


def shared_weight_chain():
    """x -> mm0 -> mm1, both reading the one weight w."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y0"], name="mm0"),
             helper.make_node("MatMul", ["y0", "w"], ["y1"], name="mm1")]
    return _model(nodes, ["y1"], [_weight("w", 0)])


def test_the_updated_weights_are_sent_to_every_other_device_reading_them():
    g = load_graph(shared_weight_chain())
    sim = Simulator(g, DEVICES, OnlyTransfers(DEVICES), training=TrainingSpec())
    assert sim.simulate([0, 0]).step_time == 0.0
    act, weight = 1.0 + ACT * 1e-3, 1.0 + WEIGHT * 1e-3
    # y0 forward; grad:y0 and mm1's share of grad:w back to w's update on cpu:0, one after the other
    # on the link; then the updated w to cpu:1, whose mm1 reads it in the next step
    assert sim.simulate([0, 1]).step_time == pytest.approx(2 * act + 2 * weight)
    refreshes = [s.name for s in sim.program.steps if s.op_type == "refresh"]
    assert refreshes == ["refresh:w@mm1"]


def test_a_device_that_only_reads_the_weights_gets_them_and_holds_the_copy():
    """logits = x @ w (cross-entropy on it) on cpu:0, y1 = x @ w (no loss) on cpu:1: cpu:1 sends
    no gradient, but it still reads w, so the updated w is copied to it after the update."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logits"], name="mm0"),
             helper.make_node("MatMul", ["x", "w"], ["y1"], name="mm1")]
    g = load_graph(_model(nodes, ["logits", "y1"], [_weight("w", 0)]))
    spec = TrainingSpec(loss=Loss("cross_entropy"), targets={"logits": np.zeros(4, dtype=np.int64)},
                        optimizer=OptimizerSpec(momentum=0.0))
    sim = Simulator(g, DEVICES, OnlyTransfers(DEVICES), training=spec)
    alone, split = sim.simulate([0, 0]), sim.simulate([0, 1])
    assert alone.step_time == 0.0 and split.step_time == pytest.approx(1.0 + WEIGHT * 1e-3)
    # cpu:1: w and x for the whole step, and the copy of the updated w at its end
    assert split.peak_memory[1] == 2 * WEIGHT + ACT
    batch = simulate_batch(sim, np.array([[0, 0], [0, 1], [1, 0]]))
    for row, step, peaks in zip([[0, 0], [0, 1], [1, 0]], batch.step_time, batch.peak_memory):
        one = sim.simulate(row)
        assert one.step_time == step and one.peak_memory == peaks.tolist()


def test_training_memory_holds_gradients_saved_activations_and_optimizer_state():
    g = load_graph(chain(2))
    cost = AnalyticCostModel(DEVICES)
    inference = Simulator(g, DEVICES, cost).simulate([0, 0]).peak_memory[0]
    sgd = Simulator(g, DEVICES, cost, training=TrainingSpec()).simulate([0, 0]).peak_memory[0]
    adam = Simulator(g, DEVICES, cost,
                     training=TrainingSpec(optimizer=OptimizerSpec("adam"))).simulate([0, 0]).peak_memory[0]
    assert sgd >= inference + 2 * WEIGHT            # the momentum of both weights
    assert adam == sgd + 2 * WEIGHT                  # Adam keeps two moments: one weight's worth more each


def test_the_batch_pass_gives_exactly_the_one_at_a_time_training_steps():
    g = load_graph(fork())
    sim = Simulator(g, DEVICES, AnalyticCostModel(DEVICES), [5 * WEIGHT, None, None], training=TrainingSpec())
    every = np.random.default_rng(0).integers(0, len(DEVICES), (200, len(g.nodes)))
    batch = simulate_batch(sim, every)
    assert {"oom", None} == set(batch.failure)
    bound = lower_bound(g, DEVICES, AnalyticCostModel(DEVICES), TrainingSpec()).value
    for row, step, peaks, failure in zip(every, batch.step_time, batch.peak_memory, batch.failure):
        one = sim.simulate(row.tolist())
        assert one.failure == failure and one.step_time == step and one.peak_memory == peaks.tolist()
        assert step >= bound * (1 - 1e-9)


def test_the_training_lower_bound_counts_the_backward_and_the_updates():
    g = load_graph(chain(3))
    cost = AnalyticCostModel(DEVICES)
    inference, training = lower_bound(g, DEVICES, cost), lower_bound(g, DEVICES, cost, TrainingSpec())
    # a chain: forward, then backward through the same nodes, at the fastest device
    assert training.critical_path > (1 + BACKWARD_FACTOR) * inference.critical_path
    assert training.value > inference.value
    sim = Simulator(g, DEVICES, cost, training=TrainingSpec())
    assert all(training.value <= sim.simulate([d] * 3).step_time for d in range(len(DEVICES)))


def test_the_training_load_bound_shares_every_step_of_independent_work():
    """Four independent MatMuls on two identical devices: each device does at least half of
    every forward, backward, loss and update."""
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"], name=f"mm{i}") for i in range(4)]
    g = load_graph(_model(nodes, [f"y{i}" for i in range(4)], [_weight(f"w{i}", i) for i in range(4)]))
    devices = ["cpu:0", "cpu:1"]
    cost = AnalyticCostModel(devices)
    program = training_program(g, devices, cost, TrainingSpec())
    assert lower_bound(g, devices, cost, TrainingSpec()).load == pytest.approx(
        sum(row[0] for row in program.times) / 2, rel=1e-6)


def test_the_simulated_measurer_records_the_objective_and_refuses_a_forward_profile():
    g = load_graph(chain(2))
    placement = Placement.single_device(list(g.nodes), "cpu:0", devices=DEVICES)
    m = SimulatedMeasurer(g, DEVICES, training=TrainingSpec(optimizer=OptimizerSpec("adam"))).measure(placement)
    assert m.ok and m.protocol["objective"] == "training" and m.protocol["optimizer"] == "adam"
    assert SimulatedMeasurer(g, DEVICES).measure(placement).protocol["objective"] == "inference"
    forward = ProfiledCostModel(Profile(devices=DEVICES, op_times={n: dict.fromkeys(DEVICES, 1e-3) for n in g.nodes},
                                        protocol={"objective": "inference"}))
    with pytest.raises(PlacerError, match="profile with --objective training"):
        SimulatedMeasurer(g, DEVICES, forward, training=TrainingSpec())


def test_the_loss_of_an_output_no_step_makes_runs_with_its_first_gradient_reader():
    """y = Relu(x) @ w @ w with w an output too: w's loss term has no producer; it runs on mm0's
    device (w's first gradient reader, not relu's, the first node), and so does w's update
    (backward:mm0 is its last contribution)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w"], ["a"], name="mm0"),
             helper.make_node("MatMul", ["a", "w"], ["y"], name="mm1")]
    g = load_graph(_model(nodes, ["y", "w"], [_weight("w", 0)]))
    program = training_program(g, DEVICES, AnalyticCostModel(DEVICES), TrainingSpec())
    node_of = {s.name: list(g.nodes)[k] for s, k in zip(program.steps, program.node_of)}
    assert node_of["loss:y"] == "mm1"
    assert node_of["loss:w"] == node_of["update:w"] == "mm0"
