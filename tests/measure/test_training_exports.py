"""`placer run --objective training` on the exports a detector, an OCR model and a Transformer
encoder make (no torchvision: small torch modules built the way YOLO/RetinaNet and CRNN are):
the gradients equal torch autograd on the module, on one device and under a random 2-device
placement; integer paths (ArgMax, TopK indices, NonMaxSuppression, a padding mask) get no
gradient; an op without a backward on a gradient path is refused in one error."""

from __future__ import annotations

import random

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from placer.cli import main
from placer.kernels.loading import load_graph
from placer.placement import Placement


class Detector(nn.Module):
    """Conv backbone, an FPN top-down path (nearest and bilinear upsampling, a concat), a
    box/class head per level with a YOLO decode (sigmoid, split, grid, anchors), then corner
    boxes, class scores, the best score per box and the top 5 of them."""

    def __init__(self, classes: int = 3, anchors: int = 2) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.SiLU(), nn.Conv2d(8, 8, 3, 1, 1), nn.ReLU())
        self.c3 = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.SiLU())
        self.c4 = nn.Sequential(nn.Conv2d(16, 16, 3, 2, 1), nn.SiLU())
        self.lateral = nn.Conv2d(16, 16, 1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.fuse = nn.Conv2d(32, 16, 3, 1, 1)
        self.heads = nn.ModuleList(nn.Conv2d(16, anchors * (5 + classes), 1) for _ in range(2))
        self.anchors, self.per_anchor = anchors, 5 + classes
        self.register_buffer("anchor", torch.tensor([[1.0, 1.5], [2.0, 1.0]]))

    def forward(self, x):
        c3 = self.c3(self.stem(x))
        p4 = self.lateral(self.c4(c3))
        p3 = self.fuse(torch.cat([self.up(p4), c3], 1))
        p3 = p3 + F.interpolate(p4, size=p3.shape[-2:], mode="bilinear", align_corners=False)
        levels = []
        for head, p, stride in zip(self.heads, (p3, p4), (8, 16)):
            n, _, h, w = p.shape
            y = head(p).reshape(n, self.anchors, self.per_anchor, h, w).permute(0, 1, 3, 4, 2).sigmoid()
            xy, wh, conf = y.split((2, 2, self.per_anchor - 4), -1)
            gy, gx = torch.meshgrid(torch.arange(h, dtype=x.dtype), torch.arange(w, dtype=x.dtype), indexing="ij")
            xy = (xy * 2 - 0.5 + torch.stack([gx, gy], -1)) * stride
            wh = (wh * 2) ** 2 * self.anchor.reshape(1, self.anchors, 1, 1, 2) * stride
            levels.append(torch.cat([xy, wh, conf], -1).reshape(n, -1, self.per_anchor))
        det = torch.cat(levels, 1)
        boxes = torch.cat([det[..., 0:2] - det[..., 2:4] / 2, det[..., 0:2] + det[..., 2:4] / 2], -1)
        scores = det[..., 4:5] * det[..., 5:]
        best, labels = scores.max(-1)
        top, order = best.topk(5, dim=1)
        return boxes, scores.transpose(1, 2), top, labels, order


class CRNN(nn.Module):
    """Convs and pooling down to one row, a bidirectional LSTM then GRU over its columns, a
    Linear, log_softmax; and the greedy labels (ArgMax)."""

    def __init__(self, classes: int = 11) -> None:
        super().__init__()
        self.cnn = nn.Sequential(nn.Conv2d(1, 8, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(8, 16, 3, 1, 1), nn.ReLU(), nn.MaxPool2d((2, 1)),
                                 nn.Conv2d(16, 16, 3, 1, 1), nn.ReLU(), nn.AvgPool2d((4, 1)))
        self.lstm = nn.LSTM(16, 12, bidirectional=True)
        self.gru = nn.GRU(24, 10, bidirectional=True)
        self.fc = nn.Linear(20, classes)

    def forward(self, x):
        columns = self.cnn(x).squeeze(2).permute(2, 0, 1)     # (time, batch, channels)
        log_probs = F.log_softmax(self.fc(self.gru(self.lstm(columns)[0])[0]), -1)
        return log_probs, log_probs.argmax(-1)


class Encoder(nn.Module):
    """A Transformer encoder over a padded sequence (a computed bool mask: an integer path),
    a BatchNorm that no Conv absorbs (its running statistics are trained initializers), a head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(6, 16)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.BatchNorm1d(16)
        self.head = nn.Linear(16, 3)
        self.norm.running_mean.uniform_(-0.5, 0.5)
        self.norm.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        h = self.encoder(self.embed(x), src_key_padding_mask=x[..., 0] > 1.0)
        return self.head(self.norm(h.transpose(1, 2)).transpose(1, 2))


def _export(module, x, path, outputs):
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)   # the fused encoder layer has no ONNX export
    try:
        with torch.no_grad():
            torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=17,
                              input_names=["x"], output_names=outputs)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    return onnx.load(path)


def _with_nms(model: onnx.ModelProto) -> onnx.ModelProto:
    """The detector's export with NonMaxSuppression over its boxes and scores as one more
    output: an integer path whose float thresholds are initializers, not trained ones."""
    thresholds = [numpy_helper.from_array(np.array([4], np.int64), "max_per_class"),
                  numpy_helper.from_array(np.array([0.5], np.float32), "iou_threshold"),
                  numpy_helper.from_array(np.array([0.1], np.float32), "score_threshold")]
    model.graph.initializer.extend(thresholds)
    model.graph.node.append(helper.make_node(
        "NonMaxSuppression", ["boxes", "scores", "max_per_class", "iou_threshold", "score_threshold"],
        ["keep"], name="nms"))
    model.graph.output.append(helper.make_tensor_value_info("keep", TensorProto.INT64, ["selected", 3]))
    return model


def _rnn_forms(prefix: str, rnn: nn.RNNBase):
    """How the exporter makes a one-layer torch LSTM/GRU's W, R and B from its parameters: the
    gate blocks in ONNX's order, the directions stacked, the two biases concatenated."""
    order = [0, 3, 1, 2] if isinstance(rnn, nn.LSTM) else [1, 0, 2]     # iofc from ifgo, zrh from rzn
    directions = ["", "_reverse"] if rnn.bidirectional else [""]

    def gates(t):
        blocks = t.chunk(len(order))
        return torch.cat([blocks[i] for i in order])

    def stacked(*kinds):
        return lambda ts: torch.stack([torch.cat([gates(ts[f"{prefix}.{k}_l0{d}"]) for k in kinds])
                                       for d in directions])
    return [stacked("weight_ih"), stacked("weight_hh"), stacked("bias_ih", "bias_hh")]


def _initializer_forms(module: nn.Module):
    """Functions of the module's parameters (name -> tensor) giving each initializer its export
    can hold: a parameter, its transpose (a Linear as MatMul), an RNN's W, R, B."""
    forms = []
    for name, p in module.named_parameters():
        forms.append(lambda ts, name=name: ts[name])
        if p.dim() == 2:
            forms.append(lambda ts, name=name: ts[name].T)
    for prefix, m in module.named_modules():
        if isinstance(m, (nn.LSTM, nn.GRU)):
            forms += _rnn_forms(prefix, m)
    return forms


def _torch_gradients(module, x, graph) -> tuple[float, dict[str, torch.Tensor]]:
    """torch autograd on the module (loss: mean(y^2)/2 summed over its float outputs), and the
    gradient of each initializer that one of its parameters makes."""
    params = dict(module.named_parameters())
    outputs = module(x)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    loss = sum(torch.mean(y ** 2) / 2 for y in outputs if y.is_floating_point())
    grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
    expected = {}
    for name in graph.initializers:
        value = torch.from_numpy(np.array(graph.initializer_array(name)))
        for form in _initializer_forms(module):
            made = form(params).detach()
            if made.shape == value.shape and torch.equal(made, value):
                expected[name] = form(grads)
                break
    return float(loss.detach()), expected


def _placer_run(tmp_path, path, graph, x, placement: Placement | None) -> dict[str, np.ndarray]:
    np.savez(tmp_path / "in.npz", x=x.numpy())
    where = ["--device", "cpu"]
    if placement is not None:
        placement.save(tmp_path / "placement.json")
        where = ["--placement", str(tmp_path / "placement.json")]
    assert main(["run", "--graph", str(path), *where, "--inputs", str(tmp_path / "in.npz"),
                 "--objective", "training", "--outputs", str(tmp_path / "out.npz")]) == 0
    return dict(np.load(tmp_path / "out.npz"))


@pytest.mark.parametrize("make, shape, outputs, constants", [
    (Detector, (1, 3, 32, 32), ["boxes", "scores", "top", "labels", "order"], 1),   # the anchors
    (CRNN, (2, 1, 16, 24), ["log_probs", "labels"], 0),
    (Encoder, (2, 5, 6), ["y"], 2)],    # the running mean and variance
    ids=["detector", "ocr", "transformer"])
def test_export_gradients_equal_torch_autograd_on_one_and_two_devices(make, shape, outputs, constants, tmp_path):
    torch.manual_seed(0)
    module = make().eval()
    with torch.no_grad():   # no two initializers equal (zero biases, unit norms): each is matched by value
        for p in module.parameters():
            p.normal_(0, 0.3)
    x = torch.randn(shape)
    model = _export(module, x, tmp_path / "model.onnx", outputs)
    if make is Detector:
        model = _with_nms(model)
    onnx.save(model, tmp_path / "model.onnx")
    graph = load_graph(tmp_path / "model.onnx")
    ops = {n.op_type for n in graph.nodes.values()}
    assert {Detector: {"Conv", "Resize", "Concat", "Sigmoid", "Split", "Slice", "TopK", "NonMaxSuppression"},
            CRNN: {"LSTM", "GRU", "MaxPool", "MatMul", "LogSoftmax", "ArgMax"},
            Encoder: {"LayerNormalization", "Softmax", "Erf", "Where", "BatchNormalization"}}[make] <= ops
    loss, expected = _torch_gradients(module, x, graph)
    rng = random.Random(0)
    two = Placement(["cpu:0", "cpu:1"], {n: rng.choice(["cpu:0", "cpu:1"]) for n in graph.nodes}, graph.sha256)
    for placement in (None, two):
        ours = _placer_run(tmp_path, tmp_path / "model.onnx", graph, x, placement)
        trained = sorted(k[len("grad:"):] for k in ours if k.startswith("grad:"))
        # every parameter's initializer, plus the float constants (a buffer) the graph computes with;
        # the integer paths (labels, order, NonMaxSuppression and its thresholds) add none
        assert len(expected) == len(trained) - constants and set(expected) <= set(trained)
        assert float(ours["loss"]) == pytest.approx(loss, rel=1e-5)
        for name, grad in expected.items():
            scale = float(grad.abs().max())
            np.testing.assert_allclose(ours[f"grad:{name}"], grad.numpy(), rtol=1e-3, atol=1e-4 * scale + 1e-9,
                                       err_msg=f"{name} ({'2 devices' if placement else '1 device'})")


class _Noisy(nn.Module):
    """Noise drawn like the input, on the gradient path: RandomNormalLike and RandomUniformLike."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        return h + torch.randn_like(h) + torch.rand_like(h)


def test_an_export_with_ops_without_a_backward_is_refused_in_one_error(tmp_path, capsys):
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    _export(_Noisy().eval(), x, tmp_path / "noisy.onnx", ["y"])
    np.savez(tmp_path / "in.npz", x=x.numpy())
    assert main(["run", "--graph", str(tmp_path / "noisy.onnx"), "--device", "cpu", "--inputs",
                 str(tmp_path / "in.npz"), "--objective", "training"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "these have none: RandomNormalLike (" in err and "); RandomUniformLike (" in err
