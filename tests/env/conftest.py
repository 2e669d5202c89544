"""Small real ONNX graphs for the environment's tests."""

from __future__ import annotations

import pytest

from placer.graph.load import load_graph
from testgraphs import branches


@pytest.fixture(scope="session")
def graph():
    return load_graph(branches(4, 2))
