"""Small real ONNX graphs with known optimal placements, for the learner's tests."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import onnx
import pytest

from placer.devices import parse_devices
from placer.graph.grouping import Grouping, group_graph
from placer.graph.load import load_graph
from testgraphs import branches
from placer.graph.opgraph import OpGraph
from placer.costmodel.simulator import SimulatedMeasurer


@dataclass
class Problem:
    """A graph, its grouping, a deterministic measurer, and the optimum found by brute force."""

    graph: OpGraph
    grouping: Grouping
    measurer: SimulatedMeasurer
    optimum: float
    optimal: set[tuple[int, ...]]
    feasible: int


def capped_branches(n_branches: int = 8) -> Problem:
    """Independent heavy branches on two devices whose memory caps hold only half the weights
    each: no single device can run the model, and the optimum splits the branches evenly."""
    graph = load_graph(branches(n_branches, 2))
    weights = sum(t.nbytes for t in graph.initializers.values())
    cap = weights // 2 + 100_000
    measurer = SimulatedMeasurer(graph, parse_devices(f"cpu:0[mem={cap}],cpu:1[mem={cap}]"))
    grouping = group_graph(graph, n_branches, 2)
    times = {}
    for a in itertools.product([0, 1], repeat=len(grouping)):
        m = measurer.measure(grouping.expand(a, measurer.devices))
        if m.ok:
            times[a] = m.step_time
    optimum = min(times.values())
    return Problem(graph, grouping, measurer, optimum, {a for a, t in times.items() if t == optimum}, len(times))


@pytest.fixture(scope="session")
def problem() -> Problem:
    return capped_branches()


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "branches.onnx"
    onnx.save(branches(4, 2), path)
    return path


@pytest.fixture
def make_branches():
    """The `branches(n, depth)` model builder, for tests that need their own graph."""
    return branches
