"""A local Ray runtime, started once for every test here (starting one takes seconds)."""

from __future__ import annotations

from typing import Any

import pytest

from placer.graph.load import load_graph
from placer.graph.opgraph import OpGraph
from testgraphs import branches
from testworkers import DEVICES, FaultySpec

ray = pytest.importorskip("ray")


@pytest.fixture(scope="package", autouse=True)
def local_ray(local_ray):
    """The session's local Ray runtime (tests/conftest.py) for every test here."""
    return local_ray


@pytest.fixture(scope="package")
def graph() -> OpGraph:
    return load_graph(branches(4, 2))


@pytest.fixture
def faulty(graph, tmp_path):
    """FaultySpec(fault, at, **more) counting in this test's own folder."""
    def make(fault: str = "die", at: int = 3, **more: Any) -> FaultySpec:
        return FaultySpec(DEVICES, graph=graph, counter_dir=str(tmp_path), fault=fault, at=at, **more)
    return make
