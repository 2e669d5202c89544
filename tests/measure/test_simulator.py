"""The simulator follows the executor's semantics, exactly, on graphs small enough to work out by hand."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.costmodel.protocol import own_link
from placer.devices import parse_device
from placer.graph.load import load_graph
from placer.measure.measurement import INVALID, OOM
from placer.costmodel.simulator import AnalyticCostModel, SimulatedMeasurer, Simulator, simulate_batch
from placer.placement import Placement

DEVICES = ["cpu:0", "cpu:1"]
W = 64                      # matrix width: every activation is 4 x 64 float32 = 1 KiB
ACT = 4 * W * 4             # bytes of one activation
WEIGHT = W * W * 4          # bytes of one weight matrix


def _model(nodes, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, W])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [4, W]) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _weight(name: str, seed: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal((W, W)).astype(np.float32), name)


def chain(n: int) -> onnx.ModelProto:
    """x -> mm0 -> mm1 -> ... -> mm{n-1}, each with its own weight."""
    nodes, inits, x = [], [], "x"
    for i in range(n):
        inits.append(_weight(f"w{i}", i))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"y{i}"], name=f"mm{i}"))
        x = f"y{i}"
    return _model(nodes, [x], inits)


def fork() -> onnx.ModelProto:
    """x -> a; a -> b and a -> c (independent); b, c -> add."""
    nodes = [helper.make_node("MatMul", ["x", "wa"], ["ya"], name="a"),
             helper.make_node("MatMul", ["ya", "wb"], ["yb"], name="b"),
             helper.make_node("MatMul", ["ya", "wc"], ["yc"], name="c"),
             helper.make_node("Add", ["yb", "yc"], ["y"], name="add")]
    return _model(nodes, ["y"], [_weight("wa", 0), _weight("wb", 1), _weight("wc", 2)])


class FixedCosts:
    """A `CostModel` with given op times and a linear link: latency + bytes x seconds per byte."""

    def __init__(self, op_times: dict[str, float], latency: float = 0.5, per_byte: float = 1e-3,
                 devices=DEVICES):
        self.devices, self.times, self.latency, self.per_byte = list(devices), op_times, latency, per_byte

    def op_time(self, node, device):
        return self.times[node.name]

    def transfer_time(self, nbytes, src, dst):
        return 0.0 if src == dst else self.latency + nbytes * self.per_byte

    def route(self, src, dst):
        return own_link(src, dst)


def _assign(graph, placement: dict[str, int]) -> list[int]:
    return [placement[n] for n in graph.nodes]


def test_a_chain_on_one_device_takes_the_sum_of_its_op_times():
    g = load_graph(chain(3))
    sim = Simulator(g, DEVICES, FixedCosts({"mm0": 1.0, "mm1": 2.0, "mm2": 3.0}))
    assert sim.simulate([0, 0, 0]).step_time == pytest.approx(6.0)


def test_a_cross_device_edge_waits_for_the_transfer():
    g = load_graph(chain(2))
    costs = FixedCosts({"mm0": 1.0, "mm1": 2.0})
    r = Simulator(g, DEVICES, costs).simulate([0, 1])
    assert r.step_time == pytest.approx(1.0 + costs.transfer_time(ACT, "cpu:0", "cpu:1") + 2.0)


def test_independent_branches_on_two_devices_run_in_parallel():
    g = load_graph(fork())
    costs = FixedCosts({"a": 1.0, "b": 4.0, "c": 4.0, "add": 1.0}, latency=0.25, per_byte=0.0)
    sim = Simulator(g, DEVICES, costs)
    one = sim.simulate(_assign(g, {"a": 0, "b": 0, "c": 0, "add": 0})).step_time
    two = sim.simulate(_assign(g, {"a": 0, "b": 0, "c": 1, "add": 0})).step_time
    assert one == pytest.approx(10.0)
    # c starts once ya arrives (1 + 0.25) and yc comes back at 1.25 + 4 + 0.25; b ends at 5.
    assert two == pytest.approx(1.25 + 4.0 + 0.25 + 1.0)


def test_a_device_runs_its_nodes_one_at_a_time_in_topological_order():
    g = load_graph(fork())
    costs = FixedCosts({"a": 1.0, "b": 4.0, "c": 4.0, "add": 1.0}, latency=0.0, per_byte=0.0)
    # b and c on the same device cannot overlap even though both are ready at t=1.
    r = Simulator(g, DEVICES, costs).simulate(_assign(g, {"a": 0, "b": 1, "c": 1, "add": 0}))
    assert r.step_time == pytest.approx(1.0 + 4.0 + 4.0 + 1.0)


def test_a_link_carries_one_copy_at_a_time():
    g = load_graph(fork())
    costs = FixedCosts({"a": 1.0, "b": 1.0, "c": 1.0, "add": 1.0}, latency=2.0, per_byte=0.0)
    # ya reaches cpu:1 at 3; b and c finish there at 4 and 5. Their copies to cpu:0 share the
    # link: yb arrives at 6, and yc, queued behind it, at 8 (not 7); add ends at 9.
    r = Simulator(g, DEVICES, costs).simulate(_assign(g, {"a": 0, "b": 1, "c": 1, "add": 0}))
    assert r.step_time == pytest.approx(9.0)


def test_peak_memory_counts_weights_inputs_and_live_activations():
    g = load_graph(chain(3))
    sim = Simulator(g, DEVICES, FixedCosts({"mm0": 1.0, "mm1": 1.0, "mm2": 1.0}))
    one = sim.simulate([0, 0, 0])
    # Weights (3) and the input stay; at most two activations live at once (an op's input and output).
    assert one.peak_memory == [3 * WEIGHT + ACT + 2 * ACT, 0]
    split = sim.simulate([0, 1, 1])
    # cpu:1 holds two weights, the copy of y0, y1 and y2 (the copy is freed only after mm1 ends,
    # and y2 is a graph output kept to the end).
    assert split.peak_memory[1] == 2 * WEIGHT + 2 * ACT
    assert split.peak_memory[0] == WEIGHT + ACT + ACT


@pytest.mark.parametrize("as_strings", [False, True])
def test_a_device_over_its_memory_cap_fails_as_oom(as_strings):
    g = load_graph(chain(3))
    cap = 2 * WEIGHT + 3 * ACT
    specs = [f"cpu:0[mem={cap}]", "cpu:1"]
    m = SimulatedMeasurer(g, specs if as_strings else [parse_device(s) for s in specs])
    assert m.devices == DEVICES
    single = m.measure(Placement.single_device(list(g.nodes), "cpu:0", g.sha256, DEVICES))
    assert not single.ok and single.failure == OOM and "cpu:0" in single.reason
    split = m.measure(Placement(DEVICES, {"mm0": "cpu:0", "mm1": "cpu:1", "mm2": "cpu:1"}, g.sha256))
    assert split.ok and split.peak_memory["cpu:0"] <= cap


def test_a_placement_that_misses_nodes_or_devices_is_invalid():
    g = load_graph(chain(2))
    m = SimulatedMeasurer(g, DEVICES)
    assert m.measure(Placement(DEVICES, {"mm0": "cpu:0"})).failure == INVALID
    assert m.measure(Placement(["cpu:0", "cpu:7"], {"mm0": "cpu:0", "mm1": "cpu:7"})).failure == INVALID


def test_a_node_on_a_device_kind_it_cannot_run_on_is_invalid():
    g = load_graph(chain(2))
    g.nodes["mm1"].device_kinds = frozenset({"cuda"})
    r = Simulator(g, DEVICES, AnalyticCostModel(DEVICES)).simulate([0, 0])
    assert r.failure == INVALID and "mm1" in r.reason


def test_the_analytic_model_charges_flops_bytes_and_launch_overhead():
    g = load_graph(chain(1))
    node = g.nodes["mm0"]
    cost = AnalyticCostModel(DEVICES, speeds={"cpu:0": 1e9}, mem_bandwidths={"cpu:0": 1e8},
                             launch_overhead={"cpu:0": 1e-3})
    expected = node.flops / 1e9 + (node.output_bytes + node.param_bytes) / 1e8 + 1e-3
    assert node.flops > 0 and cost.op_time(node, "cpu:0") == pytest.approx(expected)
    assert cost.op_time(node, "cpu:1") < cost.op_time(node, "cpu:0")   # default speed is faster
    assert cost.transfer_time(1000, "cpu:0", "cpu:0") == 0.0
    assert cost.transfer_time(2000, "cpu:0", "cpu:1") > cost.transfer_time(1000, "cpu:0", "cpu:1") > 0


def test_the_simulated_measurer_is_deterministic():
    g = load_graph(fork())
    m = SimulatedMeasurer(g, DEVICES)
    p = Placement(DEVICES, {"a": "cpu:0", "b": "cpu:0", "c": "cpu:1", "add": "cpu:0"}, g.sha256)
    first, second = m.measure(p), m.measure(p)
    assert first.ok and not first.cached and not second.cached
    assert first.step_time == second.step_time == first.times[0] and first.spread == 0.0
    assert SimulatedMeasurer(g, DEVICES).measure(p).step_time == first.step_time
    assert first.protocol["kind"] == "simulated"


def ladder(n: int) -> onnx.ModelProto:
    """A zoo-sized graph: n MatMuls, each added to the running sum of the ones before."""
    nodes, inits, x = [], [], "x"
    for i in range(n):
        inits.append(_weight(f"w{i}", i))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        if i:
            nodes.append(helper.make_node("Add", [f"m{i}", x], [f"s{i}"], name=f"add{i}"))
            x = f"s{i}"
        else:
            x = "m0"
    return _model(nodes, [x], inits)


def test_the_batch_simulation_matches_one_at_a_time_on_a_zoo_sized_graph():
    """Hundreds of random placements of a 400-node graph on three devices: the vectorised pass
    gives exactly the step times and peaks of `Simulator.simulate`, each at least the longest op."""
    g = load_graph(ladder(200))
    devices = ["cpu:0", "cpu:1", "cuda:0"]
    sim = Simulator(g, devices, AnalyticCostModel(devices))
    every = np.random.default_rng(0).integers(0, len(devices), (300, len(g.nodes)))
    batch = simulate_batch(sim, every)
    longest = max(max(row) for row in sim.op_time)
    for row, step, peaks, failure in zip(every, batch.step_time, batch.peak_memory, batch.failure):
        one = sim.simulate(row.tolist())
        assert failure is None and one.failure is None
        assert one.step_time == step >= longest and one.peak_memory == peaks.tolist()


def test_the_batch_simulation_gives_exactly_the_one_at_a_time_results():
    g = load_graph(fork())
    devices = ["cpu:0", "cpu:1", "cuda:0"]
    g.nodes["b"].device_kinds = frozenset({"cpu"})          # so some placements are invalid
    sim = Simulator(g, devices, AnalyticCostModel(devices), [3 * WEIGHT, None, None])
    every = np.array(list(itertools.product(range(3), repeat=len(g.nodes))))
    batch = simulate_batch(sim, every)
    assert {"oom", "invalid", None} == set(batch.failure)
    for row, step, peaks, failure in zip(every, batch.step_time, batch.peak_memory, batch.failure):
        one = sim.simulate(row.tolist())
        assert one.failure == failure
        if failure != INVALID:
            assert one.step_time == step and one.peak_memory == peaks.tolist()


def test_the_simulation_is_the_same_with_more_devices_than_fit_in_a_machine_word():
    """Past 62 devices the readers of a tensor are listed another way; the results do not change."""
    g = load_graph(ladder(10))
    devices = [f"cpu:{i}" for i in range(70)]
    sim = Simulator(g, devices, AnalyticCostModel(devices))
    every = np.random.default_rng(0).integers(0, len(devices), (20, len(g.nodes)))
    batch = simulate_batch(sim, every)
    for row, step, peaks in zip(every, batch.step_time, batch.peak_memory):
        one = sim.simulate(row.tolist())
        assert one.step_time == step and one.peak_memory == peaks.tolist()


class SharedBus(FixedCosts):
    """`FixedCosts` whose copies all cross one bus (a PCIe host bridge): one copy at a time."""

    def route(self, src, dst):
        return ("bus",)


def test_copies_over_a_shared_link_wait_for_each_other_and_over_their_own_links_do_not():
    graph = load_graph(fork())
    three = ["cpu:0", "cpu:1", "cpu:2"]
    times = {"a": 1.0, "b": 1.0, "c": 1.0, "add": 1.0}
    own, shared = FixedCosts(times, devices=three), SharedBus(times, devices=three)
    copy = own.transfer_time(graph.tensors["ya"].nbytes, "cpu:0", "cpu:1")
    # a on cpu:0 sends ya to cpu:1 (b) and cpu:2 (c) at once; c's output comes back to cpu:1 (add)
    assign = _assign(graph, {"a": 0, "b": 1, "c": 2, "add": 1})
    alone = Simulator(graph, three, own).simulate(assign).step_time
    queued = Simulator(graph, three, shared).simulate(assign).step_time
    assert alone == pytest.approx(3.0 + 2 * copy)       # the two copies of ya side by side
    assert queued == pytest.approx(3.0 + 3 * copy)      # the second copy of ya waits for the first
    batch = simulate_batch(Simulator(graph, three, shared), np.asarray([assign, [0, 0, 0, 0]]))
    assert batch.step_time.tolist() == pytest.approx([queued, 4.0])
