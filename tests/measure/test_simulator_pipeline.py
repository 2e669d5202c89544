"""The simulator and the lower bound of a pipelined step: the textbook bubble on a balanced chain,
the batch pass equal to the one-placement pass, in-flight memory, and a bound no placement beats."""

from __future__ import annotations

import random

import numpy as np
import onnx
import pytest

from placer.graph.load import load_graph
from placer.costmodel.lower_bound import lower_bound
from placer.program.pipeline import Pipeline
from placer.costmodel.simulator import AnalyticCostModel, Simulator, SimulatedMeasurer, simulate_batch
from placer.program.training import TrainingSpec
from testgraphs import branches

DEPTH = 8


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """8 equal layers (MatMul, Relu), then a Concat of one input."""
    path = tmp_path_factory.mktemp("sim_pipeline") / "chain.onnx"
    onnx.save(branches(1, DEPTH, width=256, batch=16), path)
    return load_graph(path)


def balanced(graph, p: int) -> list[int]:
    """Layer k on stage k * p // DEPTH: p stages of equal work."""
    return [min(int(n.rsplit("_", 1)[1]) * p // DEPTH, p - 1) if "_" in n else p - 1 for n in graph.nodes]


def devices(p: int) -> list[str]:
    return [f"cpu:{i}" for i in range(p)]


@pytest.mark.parametrize("p", [2, 4])
@pytest.mark.parametrize("m", [4, 8])
@pytest.mark.parametrize("training", [None, TrainingSpec()], ids=["inference", "training"])
def test_bubble_of_a_balanced_chain_is_the_textbook_one(chain, p, m, training):
    for schedule in ("gpipe", "1f1b"):
        sim = Simulator(chain, devices(p), AnalyticCostModel(devices(p)), training=training,
                        pipeline=Pipeline(m, schedule))
        assign = balanced(chain, p)
        result = sim.simulate(assign)
        textbook = (p - 1) / (m + p - 1)
        assert sim.bubble(assign, result.step_time) == pytest.approx(textbook, rel=0.10), schedule


def test_one_device_runs_the_micro_batches_one_after_another(chain):
    cost = AnalyticCostModel(devices(2))
    one = Simulator(chain, devices(2), cost).simulate([0] * len(chain.nodes)).step_time
    piped = Simulator(chain, devices(2), cost, pipeline=Pipeline(8)).simulate([0] * len(chain.nodes)).step_time
    assert piped == pytest.approx(8 * one)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_batch_pass_equals_one_placement_at_a_time(chain, schedule):
    sim = Simulator(chain, devices(3), AnalyticCostModel(devices(3)), training=TrainingSpec(),
                    pipeline=Pipeline(4, schedule))
    rng = np.random.default_rng(0)
    assign = np.vstack([balanced(chain, 3), rng.integers(0, 3, size=(5, len(chain.nodes)))])
    batch = simulate_batch(sim, assign)
    for row, t, peak in zip(assign, batch.step_time, batch.peak_memory):
        r = sim.simulate(tuple(row))
        assert t == pytest.approx(r.step_time) and list(peak) == r.peak_memory


def test_1f1b_peaks_below_gpipe_on_the_first_stage(chain):
    peaks = {s: Simulator(chain, devices(2), AnalyticCostModel(devices(2)), training=TrainingSpec(),
                          pipeline=Pipeline(8, s)).simulate(balanced(chain, 2)).peak_memory for s in ("gpipe", "1f1b")}
    assert peaks["1f1b"][0] < peaks["gpipe"][0]


@pytest.mark.parametrize("training", [None, TrainingSpec()], ids=["inference", "training"])
def test_no_placement_beats_the_pipelined_lower_bound(chain, training):
    p, m = 2, 8
    cost = AnalyticCostModel(devices(p))
    bound = lower_bound(chain, devices(p), cost, training, Pipeline(m))
    single = lower_bound(chain, devices(p), cost, training)
    # every micro-batch's work; a training step's updates once, not m times
    if training is None:
        assert bound.load == pytest.approx(m * single.load)
    else:
        assert (m - 1) * single.load < bound.load < m * single.load
    assert bound.critical_path >= single.critical_path
    assert 0 < bound.fill_drain <= bound.value
    rng = random.Random(0)
    placements = [balanced(chain, p), [0] * len(chain.nodes)] + [[rng.randrange(p) for _ in chain.nodes]
                                                                 for _ in range(10)]
    for schedule in ("gpipe", "1f1b"):
        sim = Simulator(chain, devices(p), cost, training=training, pipeline=Pipeline(m, schedule))
        for assign in placements:
            assert sim.simulate(assign).step_time >= bound.value * (1 - 1e-9)


def test_fill_and_drain_bound_a_chain_of_one_heavy_node(tmp_path):
    """One layer: its M runs share a device, after nothing and before nothing but the Concat."""
    path = tmp_path / "one.onnx"
    onnx.save(branches(1, 1, width=256, batch=16), path)
    graph = load_graph(path)
    cost = AnalyticCostModel(devices(2))
    bound = lower_bound(graph, devices(2), cost, None, Pipeline(8))
    step = Simulator(graph, devices(2), cost, pipeline=Pipeline(8)).simulate([0, 1, 1]).step_time
    assert bound.fill_drain > bound.load      # the load splits, a node's runs do not
    assert step >= bound.value * (1 - 1e-9)


def test_simulated_measurement_records_the_pipeline(chain):
    m = SimulatedMeasurer(chain, devices(2), pipeline=Pipeline(4, "gpipe")).measure_assignment(balanced(chain, 2))
    assert m.ok and m.protocol["micro_batches"] == 4 and m.protocol["schedule"] == "gpipe"
