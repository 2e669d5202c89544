"""`placer.graph` takes the kernel table from its caller (it imports nothing above it: `tests/test_layers.py`)."""

from __future__ import annotations

from placer.graph.load import load_graph
from testgraphs import branches


def test_the_caller_says_which_ops_have_a_kernel():
    model = branches(2, 1)
    assert all(node.device_kinds == {"cpu", "cuda"} for node in load_graph(model).nodes.values())
    graph = load_graph(model, is_supported=lambda op_type, opset, domain: op_type != "Relu" and opset == 17)
    assert {n.name for n in graph.nodes.values() if not n.device_kinds} == {"relu0_0", "relu1_0"}
