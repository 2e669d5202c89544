"""The pipeline partitioners: their dynamic program is optimal on small chains (against brute
force over every contiguous partition), and what each one balances (time with transfers,
time, parameters) is the least any contiguous partition gets."""

from __future__ import annotations

import itertools
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from placer_testkit import random_dag

from placer.errors import PlacerError
from placer.graph.load import load_graph
from placer.program.pipeline import Pipeline
from placer.costmodel.simulator import AnalyticCostModel, Simulator
from placer.placers import PLACERS
from placer.placers.partitioners import pipeline_balanced, pipeline_dp, pipeline_params, stages


def contiguous(n: int, D: int, every_device: bool):
    """Every assignment of nodes 0..n-1 to devices in non-decreasing device order."""
    for cuts in itertools.combinations_with_replacement(range(n + 1), D - 1):
        bounds = (0, *cuts, n)
        if every_device and any(a == b for a, b in zip(bounds, bounds[1:])):
            continue
        yield [k for k in range(D) for _ in range(bounds[k + 1] - bounds[k])]


def slowest(device, work, cut, memory, caps) -> float:
    """The DP's objective for one assignment, evaluated directly."""
    worst = 0.0
    for k in set(device):
        mine = [v for v, d in enumerate(device) if d == k]
        if sum(memory[v] for v in mine) > caps[k]:
            return math.inf
        worst = max(worst, sum(work[v, k] for v in mine), cut[mine[0], k] if mine[0] > 0 else 0.0)
    return worst


@pytest.mark.parametrize("D", [2, 3])
@pytest.mark.parametrize("every_device", [False, True])
def test_stages_are_optimal_on_small_chains_against_brute_force(D, every_device):
    rng = np.random.default_rng(D + 10 * every_device)
    for trial in range(40):
        n = int(rng.integers(D, 8))
        work = rng.uniform(0.1, 1.0, size=(n, D)) * rng.choice([1, 5], size=(n, 1))
        cut = rng.uniform(0, 1.5, size=(n, D))
        memory = rng.integers(1, 10, size=n).astype(float)
        caps = [float(rng.integers(10, 40)) for _ in range(D)] if trial % 2 else [math.inf] * D
        device, best = stages(work, cut, memory, caps, every_device)
        brute = min(slowest(a, work, cut, memory, caps) for a in contiguous(n, D, every_device))
        assert best == pytest.approx(brute), (trial, n)
        assert slowest(device, work, cut, memory, caps) == pytest.approx(best)
        assert device == sorted(device)


def chain_model(widths: list[int], batch: int = 8) -> onnx.ModelProto:
    """x -> MatMul+Relu layers of the given output widths: uneven work and uneven transfers."""
    rng = np.random.default_rng(0)
    nodes, inits, x, w_in = [], [], "x", widths[0]
    for k, w in enumerate(widths[1:]):
        inits.append(numpy_helper.from_array(rng.standard_normal((w_in, w)).astype(np.float32), f"w{k}"))
        nodes += [helper.make_node("MatMul", [x, f"w{k}"], [f"m{k}"], name=f"mm{k}"),
                  helper.make_node("Relu", [f"m{k}"], [f"r{k}"], name=f"relu{k}")]
        x, w_in = f"r{k}", w
    nodes.append(helper.make_node("Identity", [x], ["y"], name="out"))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, widths[0]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, w_in])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    path = tmp_path_factory.mktemp("pipeline_placers") / "uneven.onnx"
    onnx.save(chain_model([64, 512, 64, 256, 256, 128, 512]), path)
    return load_graph(path)


DEVICES = ["cpu:0", "cpu:1"]


def test_pipeline_dp_gives_the_fastest_contiguous_pipelined_step_on_a_chain(uneven):
    # slow links, so that where the cut falls matters as much as the compute
    cost = AnalyticCostModel(DEVICES, links={("cpu:0", "cpu:1"): (1e-5, 2e8), ("cpu:1", "cpu:0"): (1e-5, 2e8)})
    sim = Simulator(uneven, DEVICES, cost, pipeline=Pipeline(32))
    steps = [sim.simulate(a).step_time for a in contiguous(len(uneven.nodes), 2, False)]
    p = pipeline_dp(uneven, DEVICES, cost)
    got = sim.simulate([DEVICES.index(p.nodes[n]) for n in uneven.nodes]).step_time
    assert got <= min(steps) * 1.02   # exact in the slowest stage; fill and drain differ a little
    assert got < sorted(steps)[len(steps) // 2]


def test_balanced_and_params_minimise_their_own_measure(uneven):
    cost = AnalyticCostModel(DEVICES)
    n = len(uneven.nodes)
    nodes = list(uneven.nodes.values())
    time = [cost.op_time(node, "cpu:0") for node in nodes]
    params = [node.param_bytes for node in nodes]

    def worst(assign, values):
        return max(sum(v for v, d in zip(values, assign) if d == k) for k in range(2))

    for placer, values in ((pipeline_balanced, time), (pipeline_params, params)):
        p = placer(uneven, DEVICES, cost)
        assign = [DEVICES.index(p.nodes[name]) for name in uneven.nodes]
        assert set(assign) == {0, 1} and assign == sorted(assign)
        assert worst(assign, values) == pytest.approx(min(worst(a, values) for a in contiguous(n, 2, True)))


@pytest.mark.parametrize("name", ["pipeline_dp", "pipeline_balanced", "pipeline_params"])
def test_partitions_are_contiguous_stages_of_the_topological_order(name):
    dag = random_dag(40, seed=3)
    devices = ["cpu:0", "cpu:1", "cpu:2"]
    p = PLACERS[name].place(dag, devices, AnalyticCostModel(devices), None)
    order = [devices.index(p.nodes[n]) for n in dag.nodes if dag.nodes[n].op_type != "Constant"]
    assert order == sorted(order)


def test_pipeline_dp_refuses_what_no_partition_fits(uneven):
    with pytest.raises(PlacerError, match="mem="):
        pipeline_dp(uneven, DEVICES, AnalyticCostModel(DEVICES), {"cpu:0": 1000, "cpu:1": 1000})


def test_pipeline_dp_no_longer_refuses_stages_that_fit_once_activations_are_freed():
    """Eight layers whose activations (16 MiB each) dwarf their weights, on two devices of 80 MiB:
    counting each tensor once per reader and freeing nothing, no stage fits; freed after their last
    reader, as the simulator frees them, two stages fit, and the simulator agrees they do."""
    graph = load_graph(chain_model([64] * 9, batch=65536))
    caps = {d: 80 * 2**20 for d in DEVICES}
    cost = AnalyticCostModel(DEVICES)
    placement = pipeline_dp(graph, DEVICES, cost, caps)
    assert set(placement.nodes.values()) == set(DEVICES)   # both devices are used: neither holds it all
    sim = Simulator(graph, DEVICES, cost, mem_caps=[caps[d] for d in DEVICES])
    result = sim.simulate([DEVICES.index(placement.nodes[n]) for n in graph.nodes])
    assert result.failure is None and max(result.peak_memory) <= caps["cpu:0"]
