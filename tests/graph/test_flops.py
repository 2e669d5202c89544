"""FLOP estimates: textbook counts for heavy ops, element counts for the rest, checked against
hand computation and against torch's own FLOP counter."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from placer.graph.load import load_graph


def single_op(op: str, inputs: dict[str, tuple[int, ...]], weights: dict[str, tuple[int, ...]],
              n_outputs: int = 1, opset: int = 17, out_rank: int | None = None, **attrs) -> float:
    """FLOPs placer estimates for a one-node model."""
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in weights.items()]
    outs = [f"y{i}" for i in range(n_outputs)]
    rank = out_rank if out_rank is not None else len(next(iter(inputs.values())))
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs) + list(weights), outs, name="op", **attrs)], "one",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(outs[0], TensorProto.FLOAT, [None] * rank)], initializer=init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return load_graph(model).nodes["op"].flops


def test_conv_counts_two_flops_per_multiply_add_plus_bias():
    flops = single_op("Conv", {"x": (1, 3, 8, 8)}, {"w": (4, 3, 3, 3), "b": (4,)}, pads=[1, 1, 1, 1])
    assert flops == 2 * (4 * 8 * 8) * (3 * 3 * 3) + 4 * 8 * 8


def test_grouped_conv_counts_only_its_group():
    flops = single_op("Conv", {"x": (1, 4, 8, 8)}, {"w": (4, 2, 3, 3)}, pads=[1, 1, 1, 1], group=2)
    assert flops == 2 * (4 * 8 * 8) * (2 * 3 * 3)


def test_conv_transpose():
    flops = single_op("ConvTranspose", {"x": (1, 4, 4, 4)}, {"w": (4, 2, 3, 3)}, strides=[2, 2])
    assert flops == 2 * (4 * 4 * 4) * (2 * 3 * 3)


@pytest.mark.parametrize("trans_a", [0, 1])
def test_gemm(trans_a):
    a = (5, 2) if trans_a else (2, 5)
    assert single_op("Gemm", {"a": a}, {"b": (5, 3), "c": (3,)}, transA=trans_a) == 2 * 2 * 3 * 5 + 2 * 3


def test_batched_matmul():
    assert single_op("MatMul", {"a": (3, 2, 5)}, {"b": (5, 4)}) == 2 * 3 * 2 * 4 * 5


def test_lstm_and_gru():
    lstm = single_op("LSTM", {"x": (7, 2, 3)}, {"w": (1, 16, 3), "r": (1, 16, 4)}, out_rank=4, hidden_size=4)
    assert lstm == 7 * 2 * (2 * 4 * 4 * (3 + 4) + 8 * 4 * 4)
    gru = single_op("GRU", {"x": (7, 2, 3)}, {"w": (2, 12, 3), "r": (2, 12, 4)}, out_rank=4, hidden_size=4,
                    direction="bidirectional")
    assert gru == 7 * 2 * 2 * (2 * 3 * 4 * 7 + 8 * 3 * 4)


def test_pooling_normalisation_and_elementwise():
    assert single_op("MaxPool", {"x": (1, 2, 8, 8)}, {}, kernel_shape=[2, 2], strides=[2, 2]) == 2 * 4 * 4 * 4
    assert single_op("GlobalAveragePool", {"x": (1, 2, 8, 8)}, {}) == 128
    assert single_op("BatchNormalization", {"x": (1, 2, 8, 8)},
                     {"s": (2,), "b": (2,), "m": (2,), "v": (2,)}) == 2 * 128
    assert single_op("Relu", {"x": (1, 2, 8, 8)}, {}) == 128
    assert single_op("Add", {"x": (2, 3)}, {"b": (3,)}) == 6
    assert single_op("Transpose", {"x": (2, 3)}, {}) == 0


def test_einsum_counts_every_index_combination():
    assert single_op("Einsum", {"a": (2, 3, 4), "b": (2, 4, 5)}, {}, equation="bij,bjk->bik") == 2 * 2 * 3 * 4 * 5


def test_matches_torch_flop_counter_on_an_exported_network(tmp_path):
    """Conv and linear layers without bias: placer's total equals torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=4, bias=False),
        torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10, bias=False)).eval()
    x = torch.randn(2, 3, 16, 16)
    with FlopCounterMode(display=False) as counter:
        net(x)
    path = tmp_path / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), str(path), dynamo=False, opset_version=17)
    graph = load_graph(path)
    heavy = sum(n.flops for n in graph.nodes.values() if n.op_type in ("Conv", "MatMul", "Gemm"))
    assert heavy == counter.get_total_flops()
    assert onnx.load(str(path))  # sanity: a real file
