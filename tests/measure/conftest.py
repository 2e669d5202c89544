"""Small ONNX graphs built with onnx.helper, for the runtime's tests (executor, measurer, profile)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.graph.load import load_graph


def make_model(nodes, inputs, outputs, initializers=(), opset: int = 17) -> onnx.ModelProto:
    """A checked model; IR 8 so that onnxruntime can read it too."""
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def branchy_model() -> onnx.ModelProto:
    """Two conv branches joined by Add, a shape subgraph (Shape -> Gather -> Unsqueeze -> Concat)
    feeding Reshape, and a MatMul head: every kind of crossing a placement can create."""
    rng = np.random.default_rng(0)
    f = np.float32
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(f) * 0.3, "w1"),
        numpy_helper.from_array(rng.standard_normal((8,)).astype(f), "b1"),
        numpy_helper.from_array(rng.standard_normal((8, 3, 1, 1)).astype(f), "w2"),
        numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(f) * 0.2, "w3"),
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "axes0"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus1"),
        numpy_helper.from_array(rng.standard_normal((512, 10)).astype(f) * 0.05, "fc"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1], name="conv_a"),
        helper.make_node("Relu", ["a"], ["a_relu"], name="relu_a"),
        helper.make_node("Conv", ["a_relu", "w3"], ["a2"], pads=[1, 1, 1, 1], name="conv_a2"),
        helper.make_node("Conv", ["x", "w2"], ["b"], name="conv_b"),
        helper.make_node("Sigmoid", ["b"], ["b_sig"], name="sig_b"),
        helper.make_node("Add", ["a2", "b_sig"], ["s"], name="add"),
        helper.make_node("Shape", ["s"], ["s_shape"], name="shape"),
        helper.make_node("Gather", ["s_shape", "zero"], ["batch"], axis=0, name="gather_batch"),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"], name="unsqueeze"),
        helper.make_node("Concat", ["batch1", "minus1"], ["flat_shape"], axis=0, name="concat"),
        helper.make_node("Reshape", ["s", "flat_shape"], ["flat"], name="reshape"),
        helper.make_node("MatMul", ["flat", "fc"], ["logits"], name="head"),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])]
    outputs = [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [2, 10]),
               helper.make_tensor_value_info("a_relu", TensorProto.FLOAT, [2, 8, 8, 8])]
    return make_model(nodes, inputs, outputs, inits)


def chain_model(n: int = 4, size: int = 256) -> onnx.ModelProto:
    """x -> Relu -> Neg -> Relu -> ... (n nodes) over float32[size]: sizes easy to account by hand."""
    ops = ["Relu", "Neg"]
    nodes, prev = [], "x"
    for i in range(n):
        out = f"t{i}" if i < n - 1 else "y"
        nodes.append(helper.make_node(ops[i % 2], [prev], [out], name=f"n{i}"))
        prev = out
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])])


def embedding_model() -> onnx.ModelProto:
    """Token ids (int64) -> Gather from a table -> ReduceMean: an integer input and a data-dependent index."""
    rng = np.random.default_rng(1)
    table = numpy_helper.from_array(rng.standard_normal((10, 4)).astype(np.float32), "table")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0, name="embed"),
             helper.make_node("Tanh", ["emb"], ["y"], name="tanh")]
    return make_model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 4])], [table])


@pytest.fixture(scope="session")
def branchy():
    model = branchy_model()
    return model, load_graph(model)


@pytest.fixture(scope="session")
def chain():
    model = chain_model()
    return model, load_graph(model)


@pytest.fixture(scope="session")
def embedding():
    model = embedding_model()
    return model, load_graph(model)


def onnxruntime_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What onnxruntime computes for `model` (one thread: deterministic and light on the machine)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))
