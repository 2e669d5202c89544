"""Every mistake a user can make when loading a model is a one-line `PlacerError` that says
what to do."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.errors import PlacerError
from placer.graph.load import load_graph, parse_input_shapes

from .conftest import handmade_model, paddle_style_model


def error_of(*args, **kwargs) -> str:
    with pytest.raises(PlacerError) as info:
        load_graph(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_file(tmp_path):
    message = error_of(tmp_path / "nope.onnx")
    assert "does not exist" in message and "nope.onnx" in message


@pytest.mark.parametrize("content", [b"", b"hello, I am a text file\n", bytes(range(256)) * 4],
                         ids=["empty", "text", "binary"])
def test_not_an_onnx_model(tmp_path, content):
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    assert "is not an ONNX model" in error_of(path)


def test_directory_is_not_a_model(tmp_path):
    assert "is not a file" in error_of(tmp_path)


def test_custom_domain_ops_are_listed():
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("FusedGelu", ["x"], ["y"], domain="com.microsoft"),
         helper.make_node("Relu", ["y"], ["z"]),
         helper.make_node("MyOp", ["z"], ["w"], domain="com.example")],
        "custom", [helper.make_tensor_value_info("x", f, [1, 4])], [helper.make_tensor_value_info("w", f, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1),
                                                    helper.make_opsetid("com.example", 1)])
    message = error_of(model)
    assert "custom domains" in message
    assert "com.example::MyOp" in message and "com.microsoft::FusedGelu" in message
    assert "Relu" not in message


def test_unbound_dynamic_dimension_is_named_with_a_filled_in_example(cnn_legacy):
    message = error_of(cnn_legacy[13])
    assert "'batch'" in message and "'image'" in message
    assert "--input-shape image=1x3x16x16" in message


def test_paddle_generated_dim_names_are_reported(tmp_path):
    message = error_of(paddle_style_model(constants=10))
    assert "'p2o.DynamicDimension.0'" in message and "--input-shape x=1x3x16x16" in message


def test_every_unbound_input_is_reported_once(block_dynamo):
    message = error_of(block_dynamo)
    assert "--input-shape x=" in message and "--input-shape mask=" in message


def test_input_shape_for_an_unknown_input_lists_the_real_inputs(cnn_legacy):
    message = error_of(cnn_legacy[13], {"imgs": (1, 3, 16, 16)})
    assert "'imgs'" in message and "its inputs are: image" in message


def test_weights_are_not_offered_as_inputs(cnn_legacy):
    message = error_of(cnn_legacy[13], {"conv1.weight": (8, 3, 3, 3)})
    assert "its inputs are: image" in message and "conv1.weight" not in message.split("its inputs are:")[1]


def test_rank_mismatch(cnn_legacy):
    message = error_of(cnn_legacy[13], {"image": (1, 3, 16)})
    assert "has 3 dimensions but input 'image' has 4" in message
    assert "image=1x3x16x16" in message


def test_fixed_dimension_cannot_be_changed(cnn_legacy):
    message = error_of(cnn_legacy[13], {"image": (1, 4, 16, 16)})
    assert "fixes it at 3" in message


def test_shared_dimension_bound_two_ways(block_dynamo):
    message = error_of(block_dynamo, {"x": (2, 5, 8), "mask": (3, 5)})
    assert "bound to 2" in message and "to 3" in message


def test_input_without_shape_must_be_given():
    model = handmade_model()
    model.graph.input[0].type.tensor_type.ClearField("shape")
    assert "--input-shape a=" in error_of(model)
    assert load_graph(model, {"a": (2, 8)}).inputs[0].shape == (2, 8)


def test_invalid_model_fails_the_checker():
    model = handmade_model()
    model.graph.node[0].op_type = "NoSuchOp"
    assert "is not a valid ONNX model" in error_of(model)


def test_undefined_tensor_is_reported():
    model = handmade_model()
    model.graph.node[0].input[0] = "ghost"
    assert "ghost" in error_of(model)


def test_cycle_is_reported():
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["b"], name="second")],
        "cycle", [helper.make_tensor_value_info("x", f, [1])], [helper.make_tensor_value_info("b", f, [1])])
    assert "cycle" in error_of(helper.make_model(graph))


def test_missing_external_data_file(tmp_path, external_data):
    folder = tmp_path / "moved"
    folder.mkdir()
    (folder / external_data.name).write_bytes(external_data.read_bytes())  # the data file stays behind
    message = error_of(folder / external_data.name)
    assert "external data" in message


@pytest.mark.parametrize("spec", ["image", "image=", "=1x3", "image=1x3xA", "image=1x0x3"])
def test_bad_input_shape_syntax(spec):
    if spec == "image=":  # a scalar input is legal
        assert parse_input_shapes([spec]) == {"image": ()}
        return
    with pytest.raises(PlacerError) as info:
        parse_input_shapes([spec])
    assert "\n" not in str(info.value)
    assert re.search(r"NAME=1x3x224x224|positive", str(info.value))


def test_input_shape_parsing():
    assert parse_input_shapes(["x=1x3x224x224", "ids=2,16", "p2o.DynamicDimension=4"]) == {
        "x": (1, 3, 224, 224), "ids": (2, 16), "p2o.DynamicDimension": (4,)}
    with pytest.raises(PlacerError, match="twice"):
        parse_input_shapes(["x=1", "x=2"])


def test_data_dependent_shape_without_interpreter_support_is_an_error():
    """NonZero's output size depends on values: inference cannot know it, so the real run must;
    without an interpreter to run it the user gets one line, not a traceback."""
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["nz"], name="nz"),
         helper.make_node("Cast", ["nz"], ["y"], name="cast", to=TensorProto.FLOAT)],
        "dyn", [helper.make_tensor_value_info("x", f, [3, 4])], [helper.make_tensor_value_info("y", f, [2, None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    message = error_of(model)   # no run_model given
    assert "without a static shape" in message and "nz" in message

    def failing_run(*args, **kwargs):
        raise RuntimeError("no kernel for NonZero\ndetails")

    message = error_of(model, run_model=failing_run)
    assert "a real run to find them failed: no kernel for NonZero" in message


def test_initializer_values_do_not_count_as_unbound_inputs():
    model = handmade_model()
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((2, 8), np.float32), "unused"))
    model.graph.input.append(helper.make_tensor_value_info("unused", TensorProto.FLOAT, ["p", "q"]))
    graph = load_graph(model)
    assert [t.name for t in graph.inputs] == ["a"]


def test_cli_prints_one_line_and_exits_nonzero(tmp_path, capsys, cnn_legacy):
    from placer.cli import main

    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model")
    for argv in (["inspect", "--graph", str(bad)],
                 ["inspect", "--graph", str(cnn_legacy[13])],
                 ["inspect", "--graph", str(cnn_legacy[13]), "--input-shape", "nope=1x3x16x16"],
                 ["inspect", "--graph", str(cnn_legacy[13]), "--input-shape", "image=1x3"]):
        code = main(argv)
        err = capsys.readouterr().err
        assert code != 0
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_model_proto_without_its_external_data(external_data):
    model = onnx.load(str(external_data), load_external_data=False)
    assert "external data that is not loaded" in error_of(model)
