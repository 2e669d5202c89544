"""Small real ONNX models for the annotate tests, built with onnx.helper, and hand-made placements."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.graph.load import load_graph
from placer.placement import FORMAT, Placement

def _weight(name: str, *shape: int) -> onnx.TensorProto:
    """Deterministic per name, so every build of a model is the same model (same graph hash)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)


def diamond_model(ir_version: int = 8, batch: int | str = 1) -> onnx.ModelProto:
    """Conv -> Relu -> (Conv | Sigmoid) -> Mul -> Add(skip) -> pool -> Gemm, two outputs, and
    several nameless nodes (their names come from the loader)."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),                       # nameless
        helper.make_node("Conv", ["r1", "w2"], ["a"], name="conv_a"),
        helper.make_node("Sigmoid", ["r1"], ["b"]),                     # nameless
        helper.make_node("Mul", ["a", "b"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "r1"], ["s"]),                    # nameless
        helper.make_node("GlobalAveragePool", ["s"], ["g"], name="pool"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wfc", "bfc"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "diamond",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 5]),
                 helper.make_tensor_value_info("b", TensorProto.FLOAT, [batch, 4, 8, 8])],
        initializer=[_weight("w1", 4, 3, 3, 3), _weight("b1", 4), _weight("w2", 4, 4, 1, 1),
                     _weight("wfc", 5, 4), _weight("bfc", 5)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = ir_version
    onnx.checker.check_model(model, full_check=True)
    return model


def if_model() -> onnx.ModelProto:
    """An If whose branches read `h` from the enclosing graph without listing it as an input."""
    then_graph = helper.make_graph([helper.make_node("Relu", ["h"], ["t_out"])], "then", [],
                                   [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [2, 3])])
    else_graph = helper.make_graph([helper.make_node("Neg", ["h"], ["e_out"])], "else", [],
                                   [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [2, 3])])
    nodes = [
        helper.make_node("Add", ["x", "k"], ["h"], name="add"),
        helper.make_node("ReduceSum", ["x"], ["total"], name="sum", keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["cond"], name="positive"),
        helper.make_node("If", ["cond"], ["z"], name="branch", then_branch=then_graph, else_branch=else_graph),
        helper.make_node("Mul", ["z", "h"], ["y"], name="scale"),
    ]
    graph = helper.make_graph(
        nodes, "with_if",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[_weight("k", 2, 3), numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def placement_json(graph, assign: dict[str, str], default: str, devices: list[str],
                   sha256: str | None = "graph") -> dict:
    """A placement in the file format, written by hand: `assign` overrides, the rest on `default`."""
    return {"format": FORMAT,
            "graph": {"sha256": graph.sha256 if sha256 == "graph" else sha256},
            "devices": devices,
            "nodes": {name: assign.get(name, default) for name in graph.nodes}}


@pytest.fixture
def diamond_file(tmp_path: Path) -> Path:
    path = tmp_path / "diamond.onnx"
    onnx.save(diamond_model(), path)
    return path


@pytest.fixture
def diamond_graph(diamond_file: Path):
    return load_graph(diamond_file)


@pytest.fixture
def two_cpu_placement(diamond_graph) -> Placement:
    """The diamond on cpu:0 but its middle branch (conv_a, mul) on cpu:1: cpu:0's nodes are not
    contiguous, so the model splits into three stages."""
    data = placement_json(diamond_graph, {"conv_a": "cpu:1", "mul": "cpu:1"}, "cpu:0", ["cpu:0", "cpu:1"])
    return Placement.from_dict(json.loads(json.dumps(data)))


def feeds_for(graph, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in graph.inputs}


def ort_run(model_or_path, feeds: dict[str, np.ndarray], settings: str | None = None) -> dict[str, np.ndarray]:
    """Run a model in onnxruntime on the CPU, optionally with a layer assignment setting."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if settings is not None:
        options.add_session_config_entry("session.layer_assignment_settings", settings)
    data = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else str(model_or_path)
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))
