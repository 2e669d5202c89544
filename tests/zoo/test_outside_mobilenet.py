"""The MobileNetV2-style classifier from outside the zoo: its export computes what torch does and
placer loads it as a user's file (depthwise grouped convolutions, Clip for ReLU6)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import torch

from graphs.outside.mobilenet import MobileNetV2, export_mobilenet
from placer.kernels.loading import load_graph


def test_the_export_computes_what_the_torch_model_computes(tmp_path):
    path = export_mobilenet(tmp_path / "mobilenet.onnx", size=64, width=0.5)
    torch.manual_seed(0)
    model = MobileNetV2(0.5).eval()
    images = torch.rand(1, 3, 64, 64)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"images": images.numpy()})
    with torch.no_grad():
        expected = model(images).numpy()
    assert got.shape == (1, 1000)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_placer_loads_it_with_its_depthwise_convolutions(tmp_path):
    graph = load_graph(export_mobilenet(tmp_path / "mobilenet.onnx", size=64, width=0.5))
    convs = [n for n in graph.nodes.values() if n.op_type == "Conv"]
    assert len(convs) == 52   # stem, 17 blocks (16 expand, 17 depthwise, 17 project), head
    groups = [a.i for n in convs for a in n.proto.attribute if a.name == "group"]
    assert sum(g > 1 for g in groups) == 17
    assert {"Clip", "Add", "Gemm"} <= {n.op_type for n in graph.nodes.values()}
