"""Each zoo model exports to a valid ONNX file that computes what the torch model computes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import graphs
from placer.errors import PlacerError

NAMES = graphs.names()


def _op_counts(path) -> Counter:
    return Counter(node.op_type for node in onnx.load(path, load_external_data=False).graph.node)


def test_the_zoo_has_the_benchmark_graphs_of_the_field():
    assert NAMES == ["inception_v3", "resnet50", "rnnlm", "nmt", "transformer"]


@pytest.mark.parametrize("name", NAMES)
def test_export_passes_the_full_onnx_checker_with_static_shapes(name, small_export, small):
    model = onnx.load(small_export(name))
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == graphs.OPSET
    entry = graphs.get(name)
    assert [i.name for i in model.graph.input] == list(entry.input_names)
    assert [o.name for o in model.graph.output] == list(entry.output_names)
    shapes = graphs.input_shapes(name, **small[name])
    for graph_input in model.graph.input:
        dims = tuple(d.dim_value for d in graph_input.type.tensor_type.shape.dim)
        assert dims == shapes[graph_input.name]


@pytest.mark.parametrize("name", NAMES)
def test_onnxruntime_output_equals_the_torch_model(name, small_export, small):
    model, inputs = graphs.build_model(name, **small[name])
    with torch.no_grad():
        expected = model(*inputs).numpy()
    session = ort.InferenceSession(str(small_export(name)), providers=["CPUExecutionProvider"])
    feeds = {n: x.numpy() for n, x in zip(graphs.get(name).input_names, inputs)}
    (got,) = session.run(None, feeds)
    assert got.shape == expected.shape
    assert np.std(expected) > 1e-3  # a collapsed (constant) output would make the comparison empty
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


def test_inception_v3_has_torchvisions_parameters_and_folded_batch_norm(small_export):
    assert graphs.parameter_count("inception_v3") == 23_834_568  # torchvision's 27,161,264 minus the aux head
    ops = _op_counts(small_export("inception_v3"))
    assert ops["Conv"] == 94 and ops["Relu"] == 94
    assert "BatchNormalization" not in ops
    assert graphs.input_shapes("inception_v3") == {"input": (1, 3, 299, 299)}


def test_resnet50_has_torchvisions_parameters_and_folded_batch_norm(small_export):
    assert graphs.parameter_count("resnet50") == 25_557_032
    ops = _op_counts(small_export("resnet50"))
    assert ops["Conv"] == 53 and ops["Add"] == 16
    assert "BatchNormalization" not in ops


def test_rnnlm_is_unrolled_into_one_set_of_ops_per_cell_and_step(small_export, small):
    ops = _op_counts(small_export("rnnlm"))
    cells = 2 * small["rnnlm"]["seq_len"]
    assert "LSTM" not in ops
    assert ops["Sigmoid"] == 3 * cells and ops["Split"] == cells
    assert ops["Gemm"] == 2 * cells + small["rnnlm"]["seq_len"]  # input and hidden Gemm per cell, softmax per step


def test_nmt_attends_once_per_target_step(small_export, small):
    ops = _op_counts(small_export("nmt"))
    steps = small["nmt"]["seq_len"]
    assert "LSTM" not in ops
    assert ops["Softmax"] == steps
    assert ops["Split"] == 5 * steps  # encoder: forward, backward, top; decoder: two layers


def test_transformer_has_the_requested_number_of_blocks(small_export, small):
    ops = _op_counts(small_export("transformer"))
    layers = small["transformer"]["layers"]
    assert ops["LayerNormalization"] == 2 * layers + 1
    assert ops["Softmax"] == layers
    assert "Identity" not in ops  # no deduplicated identical initializers


def test_transformer_default_is_gpt2_small_shaped():
    assert graphs.parameter_count("transformer") == 124_490_065  # GPT-2 small's 124,439,808 + a head bias
    assert graphs.input_shapes("transformer") == {"tokens": (1, 64)}


def test_transformer_refuses_more_steps_than_positions():
    with pytest.raises(PlacerError, match="1024"):
        graphs.build_model("transformer", seq_len=1025, layers=1, vocab=10)
