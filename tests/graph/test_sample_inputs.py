"""Sample inputs at load (`load_graph(..., inputs=)`, --inputs): each array checked against its
input before any work, the shapes of the branch they take, and a failed run on generated inputs
that says so."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from controlflow import divide_by_count, export_rate_gate, rate_inputs
from placer.errors import PlacerError
from placer.graph.feeds import read_inputs, step_feeds
from placer.kernels.loading import load_graph


@pytest.fixture(scope="module")
def rate_gate(tmp_path_factory):
    return export_rate_gate(tmp_path_factory.mktemp("rate") / "vad.onnx")


@pytest.mark.parametrize("sr, frames", [(16000, 4), (8000, 2)])
def test_the_shapes_are_those_of_the_branch_the_inputs_take(rate_gate, sr, frames):
    given = rate_inputs(sr)
    graph = load_graph(rate_gate, inputs=given)
    assert graph.tensors["prob"].shape == (frames, 1)
    assert "prob" in graph.run_shapes   # only a real run on the inputs could say
    assert set(graph.sample_inputs) == {"x", "state", "sr"}
    fed = step_feeds(graph, seed=3)
    assert all(np.array_equal(fed[n], given[n]) for n in given)


def test_only_the_rate_given_the_rest_is_generated(rate_gate):
    graph = load_graph(rate_gate, inputs={"sr": np.array(8000)})
    assert graph.tensors["prob"].shape == (2, 1)
    assert set(graph.sample_inputs) == {"sr"}
    assert set(step_feeds(graph)) == {"x", "state", "sr"}


def test_on_generated_inputs_the_error_names_the_node_the_generated_inputs_and_inputs(rate_gate):
    with pytest.raises(PlacerError) as info:
        load_graph(rate_gate)
    message = str(info.value)
    assert "\n" not in message
    assert "'/If'" in message and "generated values of x, state, sr" in message and "--inputs FILE.npz" in message


@pytest.mark.parametrize("given, says", [
    ({"nope": np.zeros(3, np.float32)}, "array named 'nope', which is no input of the model; its inputs are x, state, sr"),
    ({"sr": np.array(16000, np.int32)}, "array 'sr' is int32, but the model's input is int64"),
    ({"x": np.zeros((1, 256), np.float32)}, "array 'x' has shape [1, 256], but the model's input is [1, 512]"),
    ({"sr": np.array([16000])}, "array 'sr' has shape [1], but the model's input is [] (a scalar)"),
])
def test_an_array_that_does_not_fit_is_one_line_naming_it(rate_gate, given, says):
    with pytest.raises(PlacerError) as info:
        load_graph(rate_gate, inputs=given)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_an_array_binds_a_dynamic_dimension_and_must_agree_with_input_shape(tmp_path):
    from testgraphs import branches

    model = branches(2, 1)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    x = np.ones((3, *[d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim][1:]), np.float32)
    name = model.graph.input[0].name
    graph = load_graph(model, inputs={name: x})
    assert graph.inputs[0].shape[0] == 3
    with pytest.raises(PlacerError, match=f"--input-shape binds {name} to"):
        load_graph(model, {name: (5, *x.shape[1:])}, inputs={name: x})


def test_a_file_of_inputs_is_read_and_checked(rate_gate, tmp_path):
    np.savez(tmp_path / "in.npz", **rate_inputs(8000))
    graph = load_graph(rate_gate, inputs=tmp_path / "in.npz")
    assert graph.tensors["prob"].shape == (2, 1)
    np.savez(tmp_path / "bad.npz", nope=np.zeros(1))
    with pytest.raises(PlacerError, match=r"--inputs .*bad.npz holds an array named 'nope'"):
        load_graph(rate_gate, inputs=tmp_path / "bad.npz")
    np.save(tmp_path / "one.npy", np.zeros(1))
    with pytest.raises(PlacerError, match="not an .npz file"):
        read_inputs(tmp_path / "one.npy")


def test_static_shapes_load_on_generated_inputs_as_before():
    graph = load_graph(divide_by_count())
    assert graph.sample_inputs == {} and graph.run_shapes == ()
    assert {n: a.shape for n, a in step_feeds(graph).items()} == {"x": (2, 4), "n": ()}


def test_a_scalar_input_shape_binds(tmp_path):
    model = divide_by_count()
    model.graph.input[1].type.tensor_type.ClearField("shape")   # rank not given in the file
    onnx.save(model, tmp_path / "m.onnx")
    assert load_graph(tmp_path / "m.onnx", ["n="]).inputs[1].shape == ()
    assert load_graph(tmp_path / "m.onnx", inputs={"n": np.array(2)}).inputs[1].shape == ()
