"""Small graphs with known best placements, and a tiny deterministic cost model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from placer_testkit import LinearCost, ladder_graph, make_graph  # noqa: E402


@pytest.fixture
def chain():
    """a -> b -> c -> d -> e, 4 MB tensors between them."""
    return make_graph([("a", [], 1e9), ("b", ["a"], 1e9), ("c", ["b"], 1e9), ("d", ["c"], 1e9), ("e", ["d"], 1e9)],
                      numel=1_000_000)


@pytest.fixture
def fork_join():
    """src -> (left, right) -> join; the two branches are heavy and independent."""
    return make_graph([("src", [], 1e8), ("left", ["src"], 4e9), ("right", ["src"], 4e9),
                       ("join", ["left", "right"], 1e8)], numel=1000)


@pytest.fixture
def two_halves():
    """Two disconnected chains of four nodes each, equal work."""
    spec = []
    for half in ("p", "q"):
        spec.append((f"{half}0", [], 1e9))
        spec += [(f"{half}{i}", [f"{half}{i - 1}"], 1e9) for i in range(1, 4)]
    return make_graph(spec, numel=250_000)


@pytest.fixture
def cost2():
    """Two equal devices, 1 GFLOP/s each, 1 GB/s link with 1 ms latency."""
    return LinearCost({"cpu:0": 1e9, "cpu:1": 1e9}, latency=1e-3, bandwidth=1e9)


__all__ = ["LinearCost", "make_graph"]


@pytest.fixture(scope="module")
def ladder():
    """x -> mm0 -> ... -> mm4, each MatMul with its own weight, and a Relu side branch per rung."""
    return ladder_graph(5, 64)
