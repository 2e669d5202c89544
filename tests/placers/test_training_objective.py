"""Baseline placers on the training objective: they see a training step's costs per node, and
random search scores its draws on the whole simulated training step."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.errors import PlacerError
from placer.graph.load import load_graph
from placer.engines.torch.executor import accounted_memory
from placer.costmodel.sim_program import training_program
from placer.costmodel.simulator import AnalyticCostModel, Simulator
from placer.program.training import OptimizerSpec, TrainingSpec
from placer.costmodel.training_costs import TrainingStepCosts
from placer.placement import Placement
from placer.placers import PLACERS, random_search
from placer.placers.base import MemoryBook, over_caps
from placer.evaluate.compare import baseline_rows
from placer_testkit import ladder_graph

DEVICES = ["cpu:0", "cpu:1", "cuda:0"]


@pytest.fixture(scope="module")
def ladder():
    """x -> mm0 -> ... -> mm5, each MatMul with its own 64 x 64 weight, and a side branch per rung."""
    return ladder_graph(6, 4)


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


CPUS = ["cpu:0", "cpu:1"]
ADAM = TrainingSpec(optimizer=OptimizerSpec("adam"))


def training_peaks(graph, placement) -> dict[str, int]:
    """What the executor accounts for the training step before running it (what it refuses by)."""
    return {d: e.peak for d, e in accounted_memory(graph, placement, training=ADAM).items()}


def place_training_steps(graph, caps) -> tuple[list[str], list[str]]:
    """Every cap-respecting placer on `graph`'s training step: (those whose placement is within
    the caps as the executor accounts it, refusals); a placement over a cap fails the test."""
    cost = TrainingStepCosts(graph, CPUS, AnalyticCostModel(CPUS), ADAM)
    fits, refused = [], []
    for name, spec in PLACERS.items():
        if not spec.respects_memory:
            continue
        try:
            peaks = training_peaks(graph, spec.place(graph, CPUS, cost, caps))
        except PlacerError as exc:
            refused.append(str(exc))
            continue
        assert all(peaks[d] <= cap for d, cap in caps.items()), (name, peaks)
        fits.append(name)
    return fits, refused


# The ladder's forward pass takes 103 KiB on one device, its training step with Adam 387 KiB.
CAPPED = sum(spec.respects_memory for spec in PLACERS.values())   # every cap-respecting placer


@pytest.mark.parametrize("caps, placed", [({"cpu:0": 250_000, "cpu:1": 250_000}, CAPPED), ({"cpu:0": 200_000}, CAPPED),
                                          ({"cpu:0": 120_000, "cpu:1": 120_000}, 0)])
def test_cap_respecting_placers_budget_a_training_steps_memory(ladder, caps, placed):
    """Caps the forward pass fits under on one device but a training step does not: every
    cap-respecting placer's training placement is within the caps as the executor accounts a
    training step (or refused as impossible), where their forward-pass budgets went over."""
    single = Placement.single_device(list(ladder.nodes), "cpu:0", devices=CPUS)
    assert accounted_memory(ladder, single)["cpu:0"].peak < min(caps.values()) < training_peaks(ladder, single)["cpu:0"]
    fits, refused = place_training_steps(ladder, caps)
    assert len(fits) == placed and all("training step" in r or "none of" in r for r in refused), refused
    if placed:   # budgeting the forward pass, memory-greedy keeps every node on cpu:0: out of memory
        forward = PLACERS["memory_greedy"].place(ladder, CPUS, AnalyticCostModel(CPUS), caps)
        assert training_peaks(ladder, forward)["cpu:0"] > caps["cpu:0"]


def test_what_placement_order_frees_is_checked_against_the_training_steps_accounting():
    """x -> Tanh -> b0 -> Tanh -> b1 ... and h(i+1) = h(i) * b(i): each b is saved for a Mul's
    backward but has no gradient, so freeing it once its readers are placed undercounts a training
    step (272 KiB against the executor's 368 KiB on one device); the placers check their result
    with the executor's accounting and place again with nothing freed."""
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    nodes, prev = [helper.make_node("MatMul", ["x", "w"], ["h0"], name="mm")], "x"
    for i in range(8):
        nodes.append(helper.make_node("Tanh", [prev], [f"b{i}"], name=f"side{i}"))
        nodes.append(helper.make_node("Mul", [f"h{i}", f"b{i}"], [f"h{i + 1}"], name=f"mul{i}"))
        prev = f"b{i}"
    graph = helper.make_graph(nodes, "side", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
                              [helper.make_tensor_value_info("h8", TensorProto.FLOAT, [64, 64])], [w])
    side = load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    fits, refused = place_training_steps(side, {"cpu:0": 300_000})
    assert len(fits) == CAPPED, refused


def test_the_memory_book_bounds_a_training_step_from_above(ladder):
    """With nothing freed, the book's training budget is never below the executor's accounting."""
    cost = TrainingStepCosts(ladder, CPUS, AnalyticCostModel(CPUS), ADAM)
    rng = np.random.default_rng(0)
    for _ in range(20):
        placement = Placement(CPUS, {n: CPUS[rng.integers(2)] for n in ladder.nodes})
        book = MemoryBook(ladder, CPUS, None, frees=False, cost=cost)
        for name in ladder.nodes:
            book.add(name, placement.nodes[name])
        executor = training_peaks(ladder, placement)
        assert all(book.peak[d] >= executor.get(d, 0) for d in CPUS), (book.peak, executor)


def test_the_executors_check_of_a_training_placement_counts_the_training_step(ladder):
    single = Placement.single_device(list(ladder.nodes), "cpu:0", devices=CPUS)
    assert over_caps(ladder, single, {"cpu:0": 200_000}) == []
    assert over_caps(ladder, single, {"cpu:0": 200_000}, ADAM) == ["cpu:0"]


def test_the_warm_start_judges_its_candidates_on_the_simulated_training_step(ladder):
    from placer.graph.grouping import group_graph
    from placer.policy.warm_start import plan_warm_start

    cost, training = AnalyticCostModel(DEVICES), TrainingSpec()
    # round-robin: a placement across devices, where the forward pass with a training step's costs
    # per node and the training step itself (gradients crossing back after the forward) differ
    warm = plan_warm_start(ladder, DEVICES, TrainingStepCosts(ladder, DEVICES, cost, training), {},
                           group_graph(ladder, 4, len(DEVICES)), choice="round_robin")
    node_devices = warm.grouping.node_assignment(warm.group_devices, list(ladder.nodes))
    step = Simulator(ladder, DEVICES, cost, training=training).simulate(node_devices).step_time
    assert warm.simulated_step_time == pytest.approx(step, rel=1e-12)
    assert step > Simulator(ladder, DEVICES, cost).simulate(node_devices).step_time
