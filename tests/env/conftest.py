"""Small real ONNX graphs for the environment's tests."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.graph.load import load_graph

W = 64


def branches(n: int, depth: int) -> onnx.ModelProto:
    """x -> n independent chains of MatMul+Relu -> Concat."""
    rng = np.random.default_rng(0)
    nodes, inits, ends = [], [], []
    for b in range(n):
        x = "x"
        for k in range(depth):
            inits.append(numpy_helper.from_array(rng.standard_normal((W, W)).astype(np.float32), f"w{b}_{k}"))
            nodes.append(helper.make_node("MatMul", [x, f"w{b}_{k}"], [f"m{b}_{k}"], name=f"mm{b}_{k}"))
            nodes.append(helper.make_node("Relu", [f"m{b}_{k}"], [f"r{b}_{k}"], name=f"relu{b}_{k}"))
            x = f"r{b}_{k}"
        ends.append(x)
    nodes.append(helper.make_node("Concat", ends, ["y"], name="concat", axis=1))
    graph = helper.make_graph(nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, W * n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="session")
def graph():
    return load_graph(branches(4, 2))
