"""Real models and helpers for the onnxruntime engine's tests: zoo exports at small options, a
dynamo export with symbolic dimensions, random placements, and ORT on the whole model as the oracle."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import graphs
from placer.graph.opgraph import OpGraph
from placer.placement import Placement
from testgraphs import ZOO_SMALL

CPUS = ["cpu:0[threads=1]", "cpu:1[threads=1]", "cpu:2[threads=1]"]


@pytest.fixture(scope="session")
def zoo_file(tmp_path_factory):
    """name -> the zoo model's ONNX file at its small options (`ZOO_SMALL`), exported once per session."""
    folder = tmp_path_factory.mktemp("runtime-zoo")
    done: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in done:
            done[name] = graphs.export(name, folder / f"{name}.onnx", **ZOO_SMALL[name])
        return done[name]

    return get


class Block(torch.nn.Module):
    """Two inputs sharing (batch, seq) dims; two branches (attention-like, MLP) joined at the end."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.qkv = torch.nn.Linear(8, 24)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))

    def forward(self, x, mask):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        attn = (q @ k.transpose(1, 2) + mask.unsqueeze(1)).softmax(-1) @ v
        return attn + self.mlp(x), x.reshape(x.shape[0], -1).sum(-1)


@pytest.fixture(scope="session")
def dynamo_file(tmp_path_factory) -> Path:
    """`Block` exported by torch's dynamo exporter with symbolic batch and seq dimensions."""
    path = tmp_path_factory.mktemp("dynamo") / "block_dynamo.onnx"
    batch, seq = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=512)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Block().eval(), (torch.randn(2, 5, 8), torch.zeros(2, 5)), str(path), dynamo=True,
                          input_names=["x", "mask"], dynamic_shapes={"x": {0: batch, 1: seq}, "mask": {0: batch, 1: seq}},
                          verbose=False)
    return path


def random_placement(graph: OpGraph, k: int, seed: int) -> Placement:
    """Every node on one of cpu:0..cpu:k-1 at random."""
    rng = np.random.default_rng(seed)
    names = [f"cpu:{i}" for i in range(k)]
    return Placement(names, {n: names[int(rng.integers(k))] for n in graph.nodes}, graph.sha256)


def whole_model_outputs(model: onnx.ModelProto | Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """ORT on the whole model in one plain session: the oracle."""
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def assert_same(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert set(got) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=name)


def gather_model() -> onnx.ModelProto:
    """y = Tanh(Gather(table, ids)) over a 10-row table: an id out of range is a kernel error."""
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.ones((10, 4), dtype=np.float32), "table")
    return helper.make_model(helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"), helper.make_node("Tanh", ["e"], ["y"], name="t")],
        "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], [table]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def shape_model() -> onnx.ModelProto:
    """a = Relu(x); flat = Reshape(Neg(x), [batch of a, -1]): the target shape reads `a` only
    through Shape, so it is known before the step and whoever reshapes need not wait for `a`."""
    from onnx import TensorProto, helper, numpy_helper

    consts = [numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
              numpy_helper.from_array(np.array([0], dtype=np.int64), "axes0"),
              numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus1")]
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Shape", ["a"], ["sh"], name="shape"),
             helper.make_node("Gather", ["sh", "zero"], ["n"], axis=0, name="gather"),
             helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="unsqueeze"),
             helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0, name="concat"),
             helper.make_node("Neg", ["x"], ["b"], name="neg"),
             helper.make_node("Reshape", ["b", "target"], ["flat"], name="reshape")]
    graph = helper.make_graph(nodes, "shape", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3, 4]),
                               helper.make_tensor_value_info("flat", TensorProto.FLOAT, [2, 12])], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
