"""Real ONNX files of the kinds users bring, built once per test session: torch exports (legacy
and dynamo exporters, several opsets), a PaddlePaddle-style file, a YOLO-style detector head, a
CRNN with an ONNX LSTM op, hand-built graphs with nameless nodes, several outputs, control flow
and external data."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

torch.manual_seed(0)


class SmallCNN(torch.nn.Module):
    """Conv + BN + pooling + linear, two outputs (logits and features)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv1(x)))
        y = torch.nn.functional.max_pool2d(torch.relu(self.conv2(y)), 2)
        feats = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1)
        return self.fc(feats), feats


class YoloHead(torch.nn.Module):
    """A YOLO-style detector head: Split, Resize (upsampling), Range/Expand grids, Concat."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 12, 3, stride=2, padding=1)
        self.pred = torch.nn.Conv2d(12, 3 * 6, 1)
        self.lateral = torch.nn.Conv2d(12, 18, 1)

    def forward(self, x):
        f = torch.nn.functional.silu(self.stem(x))
        p = self.pred(f)
        b, _, h, w = p.shape
        p = p.view(b, 3, 6, h, w).permute(0, 1, 3, 4, 2)
        xy, wh, conf = torch.split(p, [2, 2, 2], dim=-1)
        gy = torch.arange(h).view(1, 1, h, 1).expand(b, 3, h, w).float()
        gx = torch.arange(w).view(1, 1, 1, w).expand(b, 3, h, w).float()
        grid = torch.stack([gx, gy], dim=-1)
        boxes = torch.cat([(xy.sigmoid() + grid) * 2.0, wh.exp(), conf.sigmoid()], dim=-1)
        up = torch.nn.functional.interpolate(self.lateral(f), scale_factor=2.0, mode="nearest")
        return boxes.reshape(b, -1, 6), up


class CRNN(torch.nn.Module):
    """Conv features read column by column by a bidirectional LSTM (ONNX LSTM op)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.pool = torch.nn.MaxPool2d((8, 1))
        self.rnn = torch.nn.LSTM(8, 16, bidirectional=True)
        self.out = torch.nn.Linear(32, 20)

    def forward(self, x):
        y = self.pool(torch.relu(self.conv(x)))           # (b, 8, 1, w)
        seq = y.squeeze(2).permute(2, 0, 1)               # (w, b, 8)
        h, _ = self.rnn(seq)
        return self.out(h).log_softmax(-1)


class TwoInputBlock(torch.nn.Module):
    """Attention-like block with two inputs sharing (batch, seq) dims, for the dynamo exporter."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, x, mask):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) + mask.unsqueeze(1)
        return scores.softmax(-1) @ v


def _legacy(module, args, path: Path, *, opset: int, input_names, dynamic_axes) -> Path:
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, str(path), dynamo=False, opset_version=opset,
                          input_names=input_names, dynamic_axes=dynamic_axes)
    return path


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def cnn_legacy(models_dir) -> dict[int, Path]:
    """SmallCNN exported by the legacy exporter at opsets 11, 13 and 17 (dynamic batch), and
    converted to opset 21 with onnx.version_converter."""
    paths = {}
    for opset in (11, 13, 17):
        paths[opset] = _legacy(SmallCNN(), (torch.randn(2, 3, 16, 16),), models_dir / f"cnn_op{opset}.onnx",
                               opset=opset, input_names=["image"], dynamic_axes={"image": {0: "batch"}})
    converted = onnx.version_converter.convert_version(onnx.load(str(paths[17])), 21)
    paths[21] = models_dir / "cnn_op21.onnx"
    onnx.save(converted, str(paths[21]))
    return paths


@pytest.fixture(scope="session")
def cnn_dynamo(models_dir) -> Path:
    """SmallCNN exported by the dynamo exporter with a dynamic batch."""
    path = models_dir / "cnn_dynamo.onnx"
    batch = torch.export.Dim("batch", min=1, max=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(SmallCNN().eval(), (torch.randn(2, 3, 16, 16),), str(path), dynamo=True,
                          input_names=["image"], dynamic_shapes={"x": {0: batch}}, verbose=False)
    return path


@pytest.fixture(scope="session")
def block_dynamo(models_dir) -> Path:
    """TwoInputBlock exported by the dynamo exporter; both inputs share the batch and seq dims."""
    path = models_dir / "block_dynamo.onnx"
    batch, seq = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=512)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(TwoInputBlock().eval(), (torch.randn(2, 5, 8), torch.zeros(2, 5)), str(path),
                          dynamo=True, input_names=["x", "mask"],
                          dynamic_shapes={"x": {0: batch, 1: seq}, "mask": {0: batch, 1: seq}}, verbose=False)
    return path


@pytest.fixture(scope="session")
def yolo_head(models_dir) -> Path:
    """YoloHead (legacy exporter, opset 12) with dynamic batch, height and width."""
    return _legacy(YoloHead(), (torch.randn(1, 3, 32, 32),), models_dir / "yolo.onnx", opset=12,
                   input_names=["images"], dynamic_axes={"images": {0: "batch", 2: "height", 3: "width"}})


@pytest.fixture(scope="session")
def crnn(models_dir) -> Path:
    """CRNN (legacy exporter, opset 14) with dynamic batch and width."""
    return _legacy(CRNN(), (torch.randn(2, 1, 8, 24),), models_dir / "crnn.onnx", opset=14,
                   input_names=["image"], dynamic_axes={"image": {0: "batch", 3: "width"}})


def paddle_style_model(constants: int = 240) -> onnx.ModelProto:
    """A paddle2onnx-style graph (opset 11): every weight and scalar is a `Constant` node, dims are
    named p2o.DynamicDimension.K, and shapes flow through Shape/Gather/Concat/Reshape."""
    rng = np.random.default_rng(0)
    nodes, count = [], 0

    def const(array: np.ndarray) -> str:
        nonlocal count
        name = f"p2o.Constant.{count}"
        count += 1
        nodes.append(helper.make_node("Constant", [], [name], name=f"Constant_{count}",
                                      value=numpy_helper.from_array(array, name)))
        return name

    w = const(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    b = const(rng.standard_normal(4).astype(np.float32))
    nodes.append(helper.make_node("Conv", ["x", w, b], ["conv.tmp_0"], name="conv2d_0", pads=[1, 1, 1, 1]))
    current = "conv.tmp_0"
    # Paddle writes a Constant per scalar of every elementwise op: a long chain of them.
    for i in range(constants - 6):
        scalar = const(np.array(1.0 + 1e-3 * i, dtype=np.float32))
        op = "Mul" if i % 2 else "Add"
        nodes.append(helper.make_node(op, [current, scalar], [f"tmp_{i}"], name=f"elementwise_{i}"))
        current = f"tmp_{i}"
    nodes.append(helper.make_node("Shape", ["x"], ["shape_x"], name="shape_0"))
    idx = const(np.array([0], dtype=np.int64))
    nodes.append(helper.make_node("Gather", ["shape_x", idx], ["batch_dim"], name="gather_0", axis=0))
    minus_one = const(np.array([-1], dtype=np.int64))
    nodes.append(helper.make_node("Concat", ["batch_dim", minus_one], ["new_shape"], name="concat_0", axis=0))
    nodes.append(helper.make_node("Reshape", [current, "new_shape"], ["flat"], name="reshape2_0"))
    fc = const(rng.standard_normal((4 * 16 * 16, 5)).astype(np.float32))
    nodes.append(helper.make_node("MatMul", ["flat", fc], ["logits"], name="matmul_0"))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], name="softmax_0", axis=1))
    graph = helper.make_graph(
        nodes, "paddle_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["p2o.DynamicDimension.0", 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["p2o.DynamicDimension.1", 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], producer_name="PaddlePaddle")
    model.ir_version = 7
    return model


@pytest.fixture(scope="session")
def paddle_style(models_dir) -> Path:
    path = models_dir / "paddle.onnx"
    onnx.save(paddle_style_model(), str(path))
    return path


def handmade_model() -> onnx.ModelProto:
    """Nameless nodes, a duplicated name, a name that looks generated, a node with several
    outputs (Split, TopK) and several graph outputs; nodes stored out of topological order."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Relu", ["a"], ["r0"]),                               # nameless
        helper.make_node("Split", ["r0"], ["s0", "s1"], axis=1, num_outputs=2),  # nameless, 2 outputs
        helper.make_node("Add", ["s0", "s1"], ["sum"], name="Relu_0"),        # looks generated
        helper.make_node("Mul", ["sum", "sum"], ["sq"], name="dup"),
        helper.make_node("Sigmoid", ["sq"], ["sig"], name="dup"),              # duplicate name
        helper.make_node("TopK", ["sig", "k"], ["vals", "idx"], axis=1),       # nameless, 2 outputs
        helper.make_node("Relu", ["vals"], ["out"]),                           # nameless
    ]
    graph = helper.make_graph(
        nodes, "handmade",
        [helper.make_tensor_value_info("a", f, [2, 8])],
        [helper.make_tensor_value_info("out", f, ["n", "k"]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, ["n", "k"]),
         helper.make_tensor_value_info("s1", f, [None, None])],
        initializer=[numpy_helper.from_array(np.array([3], dtype=np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8  # what onnxruntime, the test oracle, reads
    return model


@pytest.fixture(scope="session")
def handmade(models_dir) -> Path:
    path = models_dir / "handmade.onnx"
    onnx.save(handmade_model(), str(path))
    return path


def control_flow_model() -> onnx.ModelProto:
    """An If whose branches read an outer-scope tensor, and a Loop summing it three times."""
    f = TensorProto.FLOAT
    then_g = helper.make_graph([helper.make_node("Mul", ["h", "h"], ["t_out"])], "then", [],
                               [helper.make_tensor_value_info("t_out", f, [2, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["h"], ["e_out"])], "else", [],
                               [helper.make_tensor_value_info("e_out", f, [2, 4])])
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "h"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", f, [2, 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", f, [2, 4])])
    nodes = [
        helper.make_node("Relu", ["x"], ["h"], name="relu"),
        helper.make_node("ReduceSum", ["x"], ["total"], name="total", keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["cond"], name="positive"),
        helper.make_node("If", ["cond"], ["branch"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trips", "", "branch"], ["looped"], name="loop", body=body),
    ]
    graph = helper.make_graph(
        nodes, "control_flow", [helper.make_tensor_value_info("x", f, [2, 4])],
        [helper.make_tensor_value_info("looped", f, [2, 4])],
        initializer=[numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
                     numpy_helper.from_array(np.array(3, dtype=np.int64), "trips")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="session")
def external_data(models_dir, cnn_legacy) -> Path:
    """The opset-17 CNN with every initializer in a separate data file."""
    folder = models_dir / "external"
    folder.mkdir()
    path = folder / "cnn_external.onnx"
    onnx.save_model(onnx.load(str(cnn_legacy[17])), str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="cnn_external.data", size_threshold=0)
    return path


def ort_shapes(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """Every top-level node output's shape from a real onnxruntime run (the test oracle)."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    declared = {o.name for o in probe.graph.output}
    for node in probe.graph.node:
        for out in node.output:
            if out and out not in declared:
                probe.graph.output.append(onnx.ValueInfoProto(name=out))
                declared.add(out)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, feeds)
    return {n: tuple(np.asarray(v).shape) for n, v in zip(names, values)}
