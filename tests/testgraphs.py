"""Small real ONNX models that several test packages build their cases on."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# The zoo's smallest options that keep each graph's structure: every layer kind, more than one step.
ZOO_SMALL: dict[str, dict[str, int]] = {
    "inception_v3": {"batch": 1},
    "resnet50": {"batch": 1},
    "rnnlm": {"batch": 2, "seq_len": 3, "vocab": 50},
    "nmt": {"batch": 2, "seq_len": 3, "vocab": 50},
    "transformer": {"batch": 2, "seq_len": 5, "layers": 2, "vocab": 50},
}


def branches(n: int, depth: int, width: int = 64, batch: int = 16) -> onnx.ModelProto:
    """x -> n independent chains of `depth` MatMul+Relu -> Concat: the heavy work splits cleanly."""
    rng = np.random.default_rng(0)
    nodes, inits, ends = [], [], []
    for b in range(n):
        x = "x"
        for k in range(depth):
            inits.append(numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), f"w{b}_{k}"))
            nodes.append(helper.make_node("MatMul", [x, f"w{b}_{k}"], [f"m{b}_{k}"], name=f"mm{b}_{k}"))
            nodes.append(helper.make_node("Relu", [f"m{b}_{k}"], [f"r{b}_{k}"], name=f"relu{b}_{k}"))
            x = f"r{b}_{k}"
        ends.append(x)
    nodes.append(helper.make_node("Concat", ends, ["y"], name="concat", axis=1))
    graph = helper.make_graph(nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, width * n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def unseen_op_model() -> onnx.ModelProto:
    """x -> Relu -> Mish (a standard op outside the graph policy's vocabulary) -> MatMul -> y."""
    w = numpy_helper.from_array(np.ones((8, 8), dtype=np.float32), "w")
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Mish", ["r"], ["s"], name="mish"),
             helper.make_node("MatMul", ["s", "w"], ["y"], name="mm")]
    graph = helper.make_graph(nodes, "unseen", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def tiny_conv_file(path, batch: int = 1):
    """x -> two 3x3 Convs (8 channels) -> Relu and Sigmoid -> Add, saved at `path`; returns it."""
    rng = np.random.default_rng(0)
    w = lambda name, *shape: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)  # noqa: E731
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], name="conv_a"),
             helper.make_node("Relu", ["a"], ["ar"], name="relu_a"),
             helper.make_node("Conv", ["x", "w2"], ["b"], pads=[1, 1, 1, 1], name="conv_b"),
             helper.make_node("Sigmoid", ["b"], ["bs"], name="sig_b"),
             helper.make_node("Add", ["ar", "bs"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8, 16, 16])],
                              initializer=[w("w1", 8, 3, 3, 3), w("w2", 8, 3, 3, 3)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path
