"""`placer.kernels.reference`: the sequential interpreter over the kernels."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.errors import PlacerError
from placer.kernels.reference import run_model, tensor_shapes


def _dynamic_model() -> onnx.ModelProto:
    """Symbolic input dims and no value_info at all: nothing downstream has a known shape."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array([-1], np.int64))),
        helper.make_node("Reshape", ["r", "k"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_runs_a_model_whose_intermediate_shapes_are_unknown():
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    model = _dynamic_model()
    out = run_model(model, {"x": x})
    w = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(out["y"], np.maximum(x @ w, 0).reshape(-1), rtol=1e-6)


def test_returns_intermediate_tensors_feeds_and_initializers_by_name():
    x = np.ones((2, 4), np.float32)
    out = run_model(_dynamic_model(), {"x": x}, outputs=["s", "h", "x", "w"])
    assert list(out) == ["s", "h", "x", "w"]
    assert out["s"].tolist() == [2, 3] and out["s"].dtype == np.int64
    assert out["h"].shape == (2, 3) and out["w"].shape == (4, 3)


def test_tensor_shapes_reports_every_node_output():
    shapes = tensor_shapes(_dynamic_model(), {"x": np.ones((7, 4), np.float32)})
    assert shapes["h"] == ((7, 3), "float32")
    assert shapes["s"] == ((2,), "int64")
    assert shapes["y"] == ((21,), "float32")


def test_a_missing_input_or_unknown_output_is_a_placer_error():
    with pytest.raises(PlacerError, match="x"):
        run_model(_dynamic_model(), {})
    with pytest.raises(PlacerError, match="nope"):
        run_model(_dynamic_model(), {"x": np.ones((1, 4), np.float32)}, outputs=["nope"])


def _if_model(inner_op: str) -> onnx.ModelProto:
    """y = If(c) then inner_op(x) else -x, the branches reading x from the enclosing graph."""
    f = TensorProto.FLOAT
    then_g = helper.make_graph([helper.make_node(inner_op, ["x"], ["z"])], "then", [],
                               [helper.make_tensor_value_info("z", f, [1])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["w"])], "else", [],
                               [helper.make_tensor_value_info("w", f, [1])])
    node = helper.make_node("If", ["c"], ["y"], name="the_if", then_branch=then_g, else_branch=else_g)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                            helper.make_tensor_value_info("x", f, [1])],
                              [helper.make_tensor_value_info("y", f, [1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_control_flow_runs_the_branch_taken_on_outer_scope_values():
    model = _if_model("Exp")
    x = np.array([0.5], np.float32)
    assert run_model(model, {"c": np.array(True), "x": x})["y"] == pytest.approx(np.exp(x))
    assert run_model(model, {"c": np.array(False), "x": x})["y"] == pytest.approx(-x)


def test_an_unsupported_op_inside_a_subgraph_is_refused_up_front():
    model = _if_model("MaxRoiPool")   # no kernel: refused before anything runs, branch taken or not
    with pytest.raises(PlacerError, match="MaxRoiPool"):
        run_model(model, {"c": np.array(False), "x": np.ones(1, np.float32)})


def test_outputs_do_not_alias_the_models_weights():
    model = _dynamic_model()
    out = run_model(model, {"x": np.ones((1, 4), np.float32)}, outputs=["w"])
    out["w"][:] = 0
    assert numpy_helper.to_array(model.graph.initializer[0]).any()


def test_a_kernel_failing_on_the_data_names_the_node():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="proj")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, None),
                                           helper.make_tensor_value_info("b", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(PlacerError, match=r"'proj' \(MatMul\) failed on inputs of shape \[2x3, 4x5\]"):
        run_model(model, {"a": np.ones((2, 3), np.float32), "b": np.ones((4, 5), np.float32)})


def test_bfloat16_and_float8_tensors_cross_the_numpy_boundary_as_ml_dtypes():
    import ml_dtypes

    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]),
             helper.make_node("Cast", ["sq"], ["f8"], to=TensorProto.FLOAT8E4M3FN),
             helper.make_node("Cast", ["f8"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [3])],
                              [helper.make_tensor_value_info("sq", TensorProto.BFLOAT16, [3]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    x = np.array([1.5, -3.0, 30.0], dtype=ml_dtypes.bfloat16)
    out = run_model(model, {"x": x})
    assert out["sq"].dtype == ml_dtypes.bfloat16
    assert out["sq"].astype(np.float32).tolist() == [2.25, 9.0, 900.0]
    assert out["y"].tolist() == [2.25, 9.0, 448.0]     # float8 e4m3fn saturates at 448


def test_local_functions_are_inlined_and_checked_by_their_bodies():
    from placer.kernels import unsupported_ops

    body = [helper.make_node("Mul", ["a", "a"], ["sq"]), helper.make_node("Add", ["sq", "a"], ["out"])]
    fn = helper.make_function("local", "SquarePlus", ["a"], ["out"], body,
                              [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("SquarePlus", ["x"], ["y"], domain="local")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, functions=[fn], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    assert unsupported_ops(model) == []
    out = run_model(model, {"x": np.array([1.0, 2.0, -1.0], np.float32)})
    assert out["y"].tolist() == [2.0, 6.0, 0.0]


def test_the_standard_domain_may_be_spelled_ai_onnx():
    # opset version 18: ReduceMax takes its axes as an input from there on, so the opset is read
    nodes = [helper.make_node("Relu", ["x"], ["r"], domain="ai.onnx"),
             helper.make_node("ReduceMax", ["r", "axes"], ["y"], domain="ai.onnx", keepdims=0)]
    graph = helper.make_graph(nodes, "spelled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              initializer=[numpy_helper.from_array(np.array([1], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx", 18)])
    x = np.array([[-1, 2, 0], [-3, -2, -5]], np.float32)
    np.testing.assert_array_equal(run_model(model, {"x": x})["y"], [2, 0])
