"""A PaddlePaddle-style classifier file for the command tests: every unknown dimension is '?'."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

def paddle_cls_model() -> onnx.ModelProto:
    """x: [?, 3, ?, ?] -> Conv -> Relu -> GlobalAveragePool -> Reshape(batch, -1) via Shape/Gather/Concat
    -> MatMul -> Softmax -> probs: [?, 5], as paddle2onnx writes a small classifier."""
    rng = np.random.default_rng(0)
    weight = lambda name, *shape: numpy_helper.from_array(  # noqa: E731
        (rng.standard_normal(shape) * 0.3).astype(np.float32), name)
    ints = lambda name, values: numpy_helper.from_array(np.array(values, dtype=np.int64), name)  # noqa: E731
    nodes = [helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["conv"], name="conv2d_0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv"], ["relu"], name="relu_0"),
             helper.make_node("GlobalAveragePool", ["relu"], ["pool"], name="pool2d_0"),
             helper.make_node("Shape", ["pool"], ["shape"], name="shape_0"),
             helper.make_node("Gather", ["shape", "zero"], ["batch"], name="gather_0", axis=0),
             helper.make_node("Concat", ["batch", "minus_one"], ["flat_shape"], name="concat_0", axis=0),
             helper.make_node("Reshape", ["pool", "flat_shape"], ["flat"], name="reshape2_0"),
             helper.make_node("MatMul", ["flat", "fc_w"], ["logits"], name="matmul_0"),
             helper.make_node("Softmax", ["logits"], ["probs"], name="softmax_0", axis=1)]
    graph = helper.make_graph(
        nodes, "paddle_cls", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", 3, "?", "?"])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["?", 5])],
        initializer=[weight("conv_w", 4, 3, 3, 3), weight("conv_b", 4), weight("fc_w", 4, 5),
                     ints("zero", [0]), ints("minus_one", [-1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], producer_name="PaddlePaddle")
    model.ir_version = 7
    return model


@pytest.fixture(scope="session")
def paddle_cls(tmp_path_factory):
    path = tmp_path_factory.mktemp("paddle") / "cls.onnx"
    onnx.save(paddle_cls_model(), str(path))
    return path
