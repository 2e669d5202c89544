"""Baseline placers on the training objective: they see a training step's costs per node, and
random search scores its draws on the whole simulated training step."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.graph.load import load_graph
from placer.measure.sim_program import training_program
from placer.measure.simulator import AnalyticCostModel, Simulator
from placer.measure.training import TrainingSpec
from placer.measure.training_costs import TrainingStepCosts
from placer.placers import random_search
from placer.placers.compare import baseline_rows

DEVICES = ["cpu:0", "cpu:1", "cuda:0"]


@pytest.fixture(scope="module")
def ladder():
    """x -> mm0 -> ... -> mm5, each MatMul with its own 64 x 64 weight, and a side branch per rung."""
    rng = np.random.default_rng(0)
    nodes, inits, x, outputs = [], [], "x", []
    for i in range(6):
        inits.append(numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"y{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Relu", [f"y{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"y{i}"
        outputs.append(f"r{i}")
    graph = helper.make_graph(nodes, "ladder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [4, 64]) for o in outputs], inits)
    return load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_a_node_costs_its_forward_backward_and_owned_updates_and_an_edge_two_copies(ladder):
    cost = AnalyticCostModel(DEVICES)
    view = TrainingStepCosts(ladder, DEVICES, cost, TrainingSpec())
    program = training_program(ladder, DEVICES, cost, TrainingSpec())
    names = [s.name for s in program.steps]
    node = ladder.nodes["mm2"]
    k = list(ladder.nodes).index("mm2")
    owned = [s for s, n in zip(names, program.node_of) if n == k]
    # y2 has two readers (relu2, mm3): their gradients are summed on y2's device
    assert sorted(owned) == ["accumulate:y2", "backward:mm2", "mm2", "update:w2"]
    for d, device in enumerate(DEVICES):
        mine = [program.times[names.index(s)][d] for s in owned]
        assert view.op_time(node, device) == pytest.approx(sum(mine))
        assert view.op_time(node, device) > 3 * cost.op_time(node, device)
    assert view.transfer_time(1024, "cpu:0", "cuda:0") == 2 * cost.transfer_time(1024, "cpu:0", "cuda:0")
    # every step belongs to one node: the per-node loads add up to the whole step
    total = sum(view.op_time(n, "cpu:0") for n in ladder.nodes.values())
    assert total == pytest.approx(sum(row[0] for row in program.times))


def test_random_search_scores_its_draws_on_the_simulated_training_step(ladder):
    cost = AnalyticCostModel(DEVICES)
    training = TrainingSpec()
    placement = random_search(ladder, DEVICES, TrainingStepCosts(ladder, DEVICES, cost, training), samples=16)
    sim = Simulator(ladder, DEVICES, cost, training=training)
    step = sim.simulate([DEVICES.index(placement.nodes[n]) for n in ladder.nodes]).step_time
    assert placement.extra["placer"]["simulated_step_time"] == pytest.approx(step, rel=1e-12)


def test_every_baseline_places_the_training_objective(ladder):
    rows = baseline_rows(ladder, DEVICES, AnalyticCostModel(DEVICES), {}, ["single", "m_etf", "m_sct", "heft",
                         "metis", "m_topo", "random_search"], options={"random_search": {"samples": 8}},
                         training=TrainingSpec())
    assert all(r.placement is not None and r.refused is None for r in rows), [r.refused for r in rows]
