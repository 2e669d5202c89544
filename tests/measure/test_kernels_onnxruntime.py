"""The kernels against onnxruntime on small representative models: a CNN, a Transformer encoder
layer, recurrent nets (torch exports and hand-built ONNX nodes), and detector/OCR-style ops."""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from placer.kernels import rnn as rnn_kernels
from placer.kernels.reference import run_model

ort = pytest.importorskip("onnxruntime")


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def assert_same_as_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                               rtol: float = 1e-4, atol: float = 1e-5) -> None:
    ours = run_model(model, feeds)
    theirs = ort_run(model, feeds)
    assert list(ours) == list(theirs)
    for name in ours:
        assert ours[name].shape == theirs[name].shape, name
        assert ours[name].dtype == theirs[name].dtype, name
        np.testing.assert_allclose(ours[name], theirs[name], rtol=rtol, atol=atol, err_msg=name)


def export(module: torch.nn.Module, *inputs: torch.Tensor, opset: int = 17) -> onnx.ModelProto:
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), inputs, buffer, dynamo=False, opset_version=opset,
                          input_names=[f"in{i}" for i in range(len(inputs))])
    return onnx.load_from_string(buffer.getvalue())


def model_of(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    # Not checked: outputs are declared without shapes, which onnxruntime accepts.
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def f32(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def test_cnn_with_batchnorm_pools_and_classifier():
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a, n) for a, n in [
        (f32(rng, 8, 3, 3, 3) * 0.3, "w"), (f32(rng, 8), "b"), (np.abs(f32(rng, 8)) + 0.5, "scale"),
        (f32(rng, 8), "shift"), (f32(rng, 8), "mean"), (np.abs(f32(rng, 8)) + 0.5, "var"),
        (f32(rng, 10, 8) * 0.2, "fc"), (f32(rng, 10), "fc_b"), (np.array([0.1], np.float32), "slope")]]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["bn"]),
        helper.make_node("PRelu", ["bn", "slope"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        helper.make_node("AveragePool", ["p"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["a"], ["hs"]),
        helper.make_node("GlobalAveragePool", ["hs"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fc_b"], ["logits"], transB=1),
        helper.make_node("LogSoftmax", ["logits"], ["y"], axis=-1),
    ]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 15, 15])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], inits)
    assert_same_as_onnxruntime(model, {"x": f32(rng, 2, 3, 15, 15)})


class _EncoderBlock(torch.nn.Module):
    """A pre-norm Transformer block written out, so the export shows the usual op mix."""

    def __init__(self, d: int = 16, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.ff1, self.ff2 = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, -1)
        q, k, v = (t.reshape(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        scores = scores.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        att = torch.softmax(scores, -1) @ v
        x = x + self.out(att.transpose(1, 2).reshape(b, n, d))
        return x + self.ff2(torch.nn.functional.gelu(self.ff1(self.norm2(x))))


def test_transformer_block_export():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    model = export(_EncoderBlock(), x, mask)
    assert {"LayerNormalization", "Softmax", "MatMul", "Erf", "Where"} <= {
        n.op_type for n in model.graph.node}
    assert_same_as_onnxruntime(model, {"in0": x.numpy(), "in1": mask.numpy()})


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_bidirectional_two_layer_recurrent_export(cell):
    torch.manual_seed(0)
    rnn = getattr(torch.nn, cell)(input_size=6, hidden_size=5, num_layers=2, bidirectional=True)
    x = torch.randn(7, 3, 6)
    model = export(rnn, x)
    assert cell in {n.op_type for n in model.graph.node}
    assert_same_as_onnxruntime(model, {"in0": x.numpy()})


def _rnn_inputs(rng, kind: str, dirs: int, hidden: int, steps: int, batch: int, size: int):
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    arrays = {"W": f32(rng, dirs, gates * hidden, size) * 0.5,
              "R": f32(rng, dirs, gates * hidden, hidden) * 0.5,
              "B": f32(rng, dirs, 2 * gates * hidden) * 0.5,
              "initial_h": f32(rng, dirs, batch, hidden)}
    if kind == "LSTM":
        arrays["initial_c"] = f32(rng, dirs, batch, hidden)
        arrays["P"] = f32(rng, dirs, 3 * hidden) * 0.5
    return arrays


@pytest.mark.parametrize("lengths", [[6, 2, 4], None], ids=["sequence_lens", "full"])
@pytest.mark.parametrize("kind,direction,attrs", [
    ("LSTM", "reverse", {"clip": 2.0}),
    ("LSTM", "bidirectional", {}),
    ("LSTM", "forward", {"input_forget": 1}),
    ("GRU", "bidirectional", {"linear_before_reset": 0}),
    ("GRU", "forward", {"linear_before_reset": 1}),
    ("GRU", "bidirectional", {"linear_before_reset": 1}),
    ("LSTM", "reverse", {}),
    ("GRU", "reverse", {"activations": ["HardSigmoid", "Tanh"]}),
    ("RNN", "bidirectional", {"activations": ["Relu", "Tanh"]}),
])
def test_onnx_recurrent_nodes_with_sequence_lengths_states_and_options(kind, direction, attrs, lengths,
                                                                     monkeypatch):
    """Without sequence_lens and with default options this runs torch's fused path."""
    rng = np.random.default_rng(3)
    dirs, hidden, steps, batch, size = (2 if direction == "bidirectional" else 1), 4, 6, 3, 5
    arrays = _rnn_inputs(rng, kind, dirs, hidden, steps, batch, size)
    if lengths is None:
        arrays.pop("P", None)   # peepholes also need the step-by-step path
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h"] + (
        ["initial_c", "P" if "P" in arrays else ""] if kind == "LSTM" else [])
    outputs = ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else [])
    node = helper.make_node(kind, names, outputs, hidden_size=hidden, direction=direction, **attrs)
    inits = [numpy_helper.from_array(v, k) for k, v in arrays.items()]
    model = model_of([node], [helper.make_tensor_value_info("X", TensorProto.FLOAT, [steps, batch, size]),
                              helper.make_tensor_value_info("sequence_lens", TensorProto.INT32, [batch])],
                     [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    feeds = {"X": f32(rng, steps, batch, size),
             "sequence_lens": np.array(lengths or [steps] * batch, np.int32)}
    fused = []
    original = rnn_kernels._RnnKernel._fused
    monkeypatch.setattr(rnn_kernels._RnnKernel, "_fused",
                        lambda self, *a: fused.append(1) or original(self, *a))
    assert_same_as_onnxruntime(model, feeds)
    default = not attrs or attrs == {"linear_before_reset": 1} or (
        kind == "LSTM" and attrs == {})
    assert bool(fused) == (lengths is None and default and kind != "RNN")


def test_lstm_batch_first_layout_equals_the_time_first_layout():
    """onnxruntime has no layout=1; the same weights in layout 0 (checked above) are the reference."""
    rng = np.random.default_rng(4)
    arrays = _rnn_inputs(rng, "LSTM", 1, 4, 5, 2, 3)
    del arrays["P"]
    x = f32(rng, 5, 2, 3)
    results = {}
    for layout in (0, 1):
        inits = dict(arrays)
        if layout:
            inits["initial_h"] = arrays["initial_h"].transpose(1, 0, 2).copy()
            inits["initial_c"] = arrays["initial_c"].transpose(1, 0, 2).copy()
        node = helper.make_node("LSTM", ["X", "W", "R", "B", "", "initial_h", "initial_c"],
                                ["Y", "Y_h", "Y_c"], hidden_size=4, layout=layout)
        model = model_of([node], [helper.make_tensor_value_info("X", TensorProto.FLOAT, None)],
                         [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ["Y", "Y_h", "Y_c"]],
                         [numpy_helper.from_array(v, k) for k, v in inits.items()], opset=14)
        results[layout] = run_model(model, {"X": x.transpose(1, 0, 2).copy() if layout else x})
    np.testing.assert_allclose(results[1]["Y"], results[0]["Y"].transpose(2, 0, 1, 3), rtol=1e-6)
    np.testing.assert_allclose(results[1]["Y_h"], results[0]["Y_h"].transpose(1, 0, 2), rtol=1e-6)
    np.testing.assert_allclose(results[1]["Y_c"], results[0]["Y_c"].transpose(1, 0, 2), rtol=1e-6)


@pytest.mark.parametrize("mode,coord,nearest", [
    ("nearest", "asymmetric", "floor"),
    ("nearest", "half_pixel", "round_prefer_floor"),
    ("nearest", "align_corners", "round_prefer_ceil"),
    ("linear", "half_pixel", None),
    ("linear", "align_corners", None),
    ("linear", "asymmetric", None),
    ("cubic", "half_pixel", None),
    ("cubic", "pytorch_half_pixel", None),
])
@pytest.mark.parametrize("by", ["scales", "sizes"])
def test_resize_modes(mode, coord, nearest, by):
    rng = np.random.default_rng(5)
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    if nearest:
        attrs["nearest_mode"] = nearest
    if by == "scales":
        # With align_corners, onnxruntime uses the integer output length where the ONNX spec
        # uses scale * length: keep those whole numbers so both agree (5 * 1.6, 7 * 4 / 7).
        scales = [1, 1, 1.6, 4 / 7] if coord == "align_corners" else [1, 1, 1.7, 0.6]
        extra = [numpy_helper.from_array(np.array(scales, np.float32), "scales")]
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)
    else:
        extra = [numpy_helper.from_array(np.array([1, 2, 9, 4], np.int64), "sizes")]
        node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
    model = model_of([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 7])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], extra, opset=13)
    assert_same_as_onnxruntime(model, {"x": f32(rng, 1, 2, 5, 7)})


def test_detector_and_ocr_style_ops():
    """Pad, DepthToSpace, TopK, GatherElements, CumSum, Where, Expand, Range, Einsum, ConvTranspose."""
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array(a, n) for a, n in [
        (np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "pads"),
        (np.array([3], np.int64), "k"), (np.array(1, np.int64), "axis1"),
        (np.array([2, 1, 1, 1], np.int64), "shape"),
        (np.array(0, np.int64), "r0"), (np.array(4, np.int64), "r4"), (np.array(1, np.int64), "r1"),
        (f32(rng, 4, 2, 3, 3) * 0.3, "wt"), (np.array(0.0, np.float32), "zero")]]
    nodes = [
        helper.make_node("Pad", ["x", "pads"], ["padded"], mode="reflect"),
        helper.make_node("ConvTranspose", ["padded", "wt"], ["up"], strides=[2, 2], pads=[1, 0, 0, 1],
                         output_padding=[1, 1]),
        helper.make_node("DepthToSpace", ["up"], ["d2s"], blocksize=1, mode="CRD"),
        helper.make_node("ReduceMean", ["d2s"], ["rows"], axes=[1], keepdims=0),
        helper.make_node("TopK", ["rows", "k"], ["vals", "idx"], axis=-1),
        helper.make_node("GatherElements", ["rows", "idx"], ["picked"], axis=-1),
        helper.make_node("CumSum", ["picked", "axis1"], ["cum"], exclusive=1, reverse=1),
        helper.make_node("Greater", ["cum", "zero"], ["pos"]),
        helper.make_node("Where", ["pos", "cum", "vals"], ["w"]),
        helper.make_node("Range", ["r0", "r4", "r1"], ["ramp"]),
        helper.make_node("Cast", ["ramp"], ["rampf"], to=TensorProto.FLOAT),
        helper.make_node("Expand", ["w", "shape"], ["big"]),
        helper.make_node("Einsum", ["big", "big"], ["y"], equation="bcij,bcik->bcjk"),
    ]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 6])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                      helper.make_tensor_value_info("rampf", TensorProto.FLOAT, None)], inits)
    assert_same_as_onnxruntime(model, {"x": f32(rng, 1, 4, 5, 6)})


@pytest.mark.parametrize("case", ["causal_gqa_past", "bool_mask_3d"])
def test_attention_op_of_opset_23(case):
    rng = np.random.default_rng(7)
    if case == "causal_gqa_past":
        q, k, v = f32(rng, 2, 4, 3, 8), f32(rng, 2, 2, 3, 8), f32(rng, 2, 2, 3, 8)
        pk, pv = f32(rng, 2, 2, 5, 8), f32(rng, 2, 2, 5, 8)
        node = helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"],
                                ["y", "present_k", "present_v"], is_causal=1)
        feeds = {"q": q, "k": k, "v": v, "pk": pk, "pv": pv}
        outs = ["y", "present_k", "present_v"]
    else:
        q, k, v = f32(rng, 2, 4, 12), f32(rng, 2, 6, 12), f32(rng, 2, 6, 12)
        mask = rng.random((4, 6)) > 0.3
        mask[:, 0] = True
        node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], q_num_heads=3,
                                kv_num_heads=3, scale=0.2)
        feeds = {"q": q, "k": k, "v": v, "mask": mask}
        outs = ["y"]
    inputs = [helper.make_tensor_value_info(n, TensorProto.BOOL if n == "mask" else TensorProto.FLOAT,
                                            list(a.shape)) for n, a in feeds.items()]
    model = model_of([node], inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                      for o in outs], opset=23)
    model.ir_version = 10
    assert_same_as_onnxruntime(model, feeds)


def test_non_max_suppression_on_random_boxes():
    rng = np.random.default_rng(8)
    corners = rng.random((2, 40, 2)).astype(np.float32) * 10
    sizes = rng.random((2, 40, 2)).astype(np.float32) * 4 + 0.5
    boxes = np.concatenate([corners, corners + sizes], -1)[..., [1, 0, 3, 2]]   # y1 x1 y2 x2
    scores = rng.random((2, 3, 40)).astype(np.float32)
    inits = [numpy_helper.from_array(np.array([7], np.int64), "max_out"),
             numpy_helper.from_array(np.array([0.3], np.float32), "iou"),
             numpy_helper.from_array(np.array([0.2], np.float32), "score")]
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score"], ["sel"])
    model = model_of([node], [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [2, 40, 4]),
                              helper.make_tensor_value_info("scores", TensorProto.FLOAT, [2, 3, 40])],
                     [helper.make_tensor_value_info("sel", TensorProto.INT64, None)], inits)
    assert_same_as_onnxruntime(model, {"boxes": boxes, "scores": scores}, rtol=0, atol=0)


@pytest.mark.parametrize("mode,ratio", [("avg", 0), ("avg", 2), ("max", 2)])
def test_roi_align_adaptive_and_fixed_sampling(mode, ratio):
    rng = np.random.default_rng(9)
    x = f32(rng, 2, 3, 12, 10)
    xy = rng.random((6, 2)).astype(np.float32) * 14 - 2
    rois = np.concatenate([xy, xy + rng.random((6, 2)).astype(np.float32) * 9 + 0.5], 1)
    batch = np.array([0, 1, 1, 0, 1, 0], np.int64)
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode, output_height=3,
                            output_width=4, sampling_ratio=ratio, spatial_scale=0.8)
    model = model_of([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
                              helper.make_tensor_value_info("rois", TensorProto.FLOAT, [6, 4]),
                              helper.make_tensor_value_info("batch", TensorProto.INT64, [6])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], opset=16)
    assert_same_as_onnxruntime(model, {"x": x, "rois": rois, "batch": batch})


def test_quantize_dequantize_per_axis_round_trip():
    rng = np.random.default_rng(10)
    x = f32(rng, 2, 4, 3)
    inits = [numpy_helper.from_array(np.array([0.02, 0.05, 0.1, 0.03], np.float32), "scale"),
             numpy_helper.from_array(np.array([3, -2, 0, 1], np.int8), "zp")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], axis=1)]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 3])],
                     [helper.make_tensor_value_info("q", TensorProto.INT8, None),
                      helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits, opset=13)
    assert_same_as_onnxruntime(model, {"x": x})


def test_deform_conv_with_offset_groups_mask_and_bias():
    rng = np.random.default_rng(11)
    x, w, b = f32(rng, 2, 4, 7, 6), f32(rng, 6, 2, 3, 3), f32(rng, 6)
    offset = f32(rng, 2, 2 * 2 * 9, 4, 3) * 1.5
    mask = rng.random((2, 2 * 9, 4, 3)).astype(np.float32)
    node = helper.make_node("DeformConv", ["x", "w", "offset", "b", "mask"], ["y"], group=2,
                            offset_group=2, pads=[1, 1, 1, 1], strides=[2, 2], kernel_shape=[3, 3])
    feeds = {"x": x, "w": w, "offset": offset, "b": b, "mask": mask}
    model = model_of([node], [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape))
                              for n, a in feeds.items()],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], opset=19)
    assert_same_as_onnxruntime(model, feeds)


class _MobileBlock(torch.nn.Module):
    """MobileNet-v3 style: hardswish, depthwise conv, squeeze-excite, classifier."""

    def __init__(self):
        super().__init__()
        self.stem, self.bn = torch.nn.Conv2d(3, 16, 3, 2, 1), torch.nn.BatchNorm2d(16)
        self.dw = torch.nn.Conv2d(16, 16, 3, 1, 1, groups=16)
        self.se1, self.se2 = torch.nn.Linear(16, 4), torch.nn.Linear(4, 16)
        self.pw, self.fc = torch.nn.Conv2d(16, 24, 1), torch.nn.Linear(24, 5)

    def forward(self, x):
        F = torch.nn.functional
        x = F.hardswish(self.bn(self.stem(x)))
        y = F.relu6(self.dw(x))
        w = F.hardsigmoid(self.se2(F.relu(self.se1(F.adaptive_avg_pool2d(y, 1).flatten(1)))))
        y = self.pw(y * w[:, :, None, None])
        return F.softmax(self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1)), -1)


class _UNetBlock(torch.nn.Module):
    """Segmentation style: group/instance norm, transposed conv, upsampling, reflect pad, skip."""

    def __init__(self):
        super().__init__()
        self.down, self.up = torch.nn.Conv2d(3, 8, 3, 2, 1), torch.nn.ConvTranspose2d(8, 8, 2, 2)
        self.gn, self.inorm = torch.nn.GroupNorm(2, 8), torch.nn.InstanceNorm2d(8, affine=True)
        self.out = torch.nn.Conv2d(11, 2, 1)

    def forward(self, x):
        F = torch.nn.functional
        a = F.leaky_relu(self.gn(self.down(x)), 0.1)
        b = F.interpolate(a, scale_factor=2, mode="bilinear", align_corners=False)
        c = self.inorm(self.up(a)) + b + F.interpolate(a, size=x.shape[-2:], mode="nearest")
        c = F.pad(c, (1, 1, 1, 1), mode="reflect")[..., 1:-1, 1:-1]
        return torch.sigmoid(self.out(torch.cat([c, x], 1)))


class _CRNN(torch.nn.Module):
    """OCR style: conv features read column by column by a bidirectional LSTM and a GRU."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3, 1, 1)
        self.lstm = torch.nn.LSTM(32, 16, bidirectional=True, batch_first=True)
        self.gru, self.fc = torch.nn.GRU(32, 16, batch_first=True), torch.nn.Linear(32, 11)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        b, c, h, w = y.shape
        y, _ = self.lstm(y.permute(0, 3, 1, 2).reshape(b, w, c * h))
        return torch.log_softmax(self.fc(y), -1), self.gru(y)[0]


class _DetectionHead(torch.nn.Module):
    """Anchor-free detector head: decode boxes on a grid, best class, top-k, gather."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 6, 1)

    def forward(self, x):
        p = self.conv(x)
        b, _, h, w = p.shape
        cls = p[:, :2].sigmoid().flatten(2)
        box = p[:, 2:].flatten(2).transpose(1, 2)
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        centers = torch.stack([xs, ys], -1).reshape(1, -1, 2).float()
        boxes = torch.cat([centers - box[..., :2].exp(), centers + box[..., 2:].exp()], -1)
        score, label = cls.max(1)
        top, idx = score.topk(10, dim=1)
        picked = torch.gather(boxes, 1, idx[..., None].expand(-1, -1, 4))
        return top, picked, label.cumsum(1), torch.where(score > 0.5, score, torch.zeros_like(score))


@pytest.mark.parametrize("module,shape", [
    (_MobileBlock, (2, 3, 32, 32)), (_UNetBlock, (1, 3, 16, 16)), (_CRNN, (2, 1, 8, 20)),
    (_DetectionHead, (2, 8, 6, 7))], ids=["mobilenet", "unet", "crnn", "detector"])
def test_common_model_family_exports(module, shape):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    model = export(module(), x)
    assert_same_as_onnxruntime(model, {"in0": x.numpy()})
