"""Static shapes for every tensor: binding, inference with folded shape arithmetic, and the real
run that finishes data-dependent shapes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from placer.errors import PlacerError
from placer.graph.fold import fold_constants
from placer.graph.load import load_graph
from placer.graph.feeds import random_feeds
from placer.graph.shapes import bind_input_shapes
from placer.graph.opgraph import TensorInfo


def nonzero_model() -> onnx.ModelProto:
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("NonZero", ["r"], ["nz"], name="nz"),
         helper.make_node("Cast", ["nz"], ["y"], name="cast", to=TensorProto.FLOAT)],
        "dyn", [helper.make_tensor_value_info("x", f, ["n", 4])], [helper.make_tensor_value_info("y", f, [2, None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_data_dependent_shape_is_finished_by_one_real_run():
    from placer.kernels.reference import run_model

    graph = load_graph(nonzero_model(), {"x": (3, 4)}, run_model=run_model)
    x = random_feeds(graph)["x"]
    expected = (2, int((np.maximum(x, 0) != 0).sum()))
    assert graph.nodes["nz"].output_info[0] == TensorInfo("nz", expected, "int64")
    assert graph.outputs[0].shape == expected
    assert graph.nodes["cast"].flops == expected[0] * expected[1]


def test_shape_arithmetic_is_folded_without_a_real_run(yolo_head):
    """The YOLO head computes its Reshape targets and Range limits from Shape nodes; they are
    folded, so no interpreter is needed (none is given here)."""
    graph = load_graph(yolo_head, {"images": (1, 3, 32, 64)})
    ranges = [n for n in graph.nodes.values() if n.op_type == "Range"]
    assert sorted(r.output_shapes[0] for r in ranges) == [(16,), (32,)]


def test_fold_constants_evaluates_shape_nodes_of_static_tensors():
    i64 = TensorProto.INT64
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Constant", [], ["idx"], value=helper.make_tensor("idx", i64, [], [2])),
         helper.make_node("Gather", ["s", "idx"], ["d"], axis=0),
         helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", i64, [], [0])),
         helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", i64, [], [1])),
         helper.make_node("Range", ["zero", "d", "one"], ["r"]),
         helper.make_node("Relu", ["x"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5])],
        [helper.make_tensor_value_info("r", i64, [None]), helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folded, values = fold_constants(model, {"x": TensorInfo("x", (2, 3, 5), "float32")}, {"": 17})
    np.testing.assert_array_equal(values["r"], np.arange(5))
    assert [n.op_type for n in folded.graph.node] == ["Relu"]  # big or unknown work stays


def _two_input_graph(a_dims, b_dims, out_dims) -> onnx.GraphProto:
    f = TensorProto.FLOAT
    return helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])], "g",
        [helper.make_tensor_value_info("a", f, a_dims), helper.make_tensor_value_info("b", f, b_dims)],
        [helper.make_tensor_value_info("c", f, out_dims)])



def test_binding_writes_shared_symbols_everywhere():
    graph = _two_input_graph(["batch", 4], ["batch", 4], ["batch", 4])
    bound = bind_input_shapes(graph, {"a": (6, 4)}, set())
    assert bound == {"a": (6, 4), "b": (6, 4)}
    assert [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim] == [6, 4]


def test_random_feeds_of_tensor_infos_are_deterministic():
    infos = [TensorInfo("x", (2, 3), "float32"), TensorInfo("ids", (4,), "int64")]
    a, b = random_feeds(infos), random_feeds(infos)
    np.testing.assert_array_equal(a["x"], b["x"])
    assert a["ids"].dtype == np.int64 and not a["ids"].any()


def test_every_tensor_of_the_graph_has_an_info(paddle_style):
    graph = load_graph(paddle_style, {"x": (2, 3, 16, 16)})
    for node in graph.nodes.values():
        for name in node.inputs + node.implicit_inputs + node.outputs:
            if name:
                assert name in graph.tensors, name
    for value in graph.model.graph.value_info:
        shape = value.type.tensor_type.shape
        assert value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in shape.dim)


def test_declared_output_shapes_do_not_override_the_ops():
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", f, [2, 3])], [helper.make_tensor_value_info("y", f, [7])])
    loaded = load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert loaded.outputs[0].shape == (2, 3) == loaded.nodes["relu"].output_shapes[0]


def test_folding_never_builds_big_tensors(monkeypatch):
    """A ConstantOfShape whose shape is known but whose output is activation-sized is left to
    shape inference instead of being evaluated."""
    import placer.graph.fold as fold

    evaluated = []
    real = fold.evaluate_node
    monkeypatch.setattr(fold, "evaluate_node", lambda node, *a: evaluated.append(node.op_type) or real(node, *a))
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("ConstantOfShape", ["s"], ["zeros"]),
         helper.make_node("Add", ["x", "zeros"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    _, values = fold_constants(model, {"x": TensorInfo("x", (64, 1024), "float32")}, {"": 17})
    assert "s" in values and "zeros" not in values and "ConstantOfShape" not in evaluated
    assert values["s"].dtype == np.int64


@pytest.mark.parametrize("anonymous", ["?", "", "unk__3", "a_dynamic_axes_1", "p2o.DynamicDimension.0"])
def test_anonymous_dimensions_bind_their_own_axis_only(anonymous):
    """'?' and generated names are placeholders, not symbols: the sizes of one input's axes are
    independent, nothing propagates to the other input or the output, and no two sizes conflict."""
    graph = _two_input_graph([anonymous, 3, anonymous], [anonymous, 3, anonymous], [anonymous, 3, anonymous])
    bound = bind_input_shapes(graph, {"a": (1, 3, 48), "b": (2, 3, 192)}, set())
    assert bound == {"a": (1, 3, 48), "b": (2, 3, 192)}
    assert [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim] == [0, 3, 0]
    with pytest.raises(PlacerError, match="input 'b', axis 0"):
        bind_input_shapes(_two_input_graph([anonymous, 3], [anonymous, 3], [anonymous, 3]), {"a": (1, 3)}, set())


def test_a_symbol_one_input_sets_to_two_sizes_is_no_conflict_and_not_shared():
    graph = _two_input_graph(["s", "s"], ["s", 4], ["s", 4])
    with pytest.raises(PlacerError, match="dynamic dimension 's' \\(input 'b'"):
        bind_input_shapes(graph, {"a": (2, 4)}, set())
    assert bind_input_shapes(graph, {"a": (2, 4), "b": (3, 4)}, set()) == {"a": (2, 4), "b": (3, 4)}


def test_a_symbol_two_inputs_bind_to_different_sizes_is_the_conflict():
    graph = _two_input_graph(["batch", "?"], ["batch", "?"], ["batch", "?"])
    with pytest.raises(PlacerError, match="'batch' is bound to 2 by input 'a' and to 3 by input 'b'"):
        bind_input_shapes(graph, {"a": (2, 5), "b": (3, 5)}, set())
    assert bind_input_shapes(graph, {"a": (2, 5), "b": (2, 7)}, set()) == {"a": (2, 5), "b": (2, 7)}
