"""The YOLO-style detector from outside the zoo: a real export placer has to take as a user's own
file (reshapes from Shape/Gather chains, meshgrid constants, Resize, a decoupled head)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import torch

from graphs.outside.yolo import YoloDetector, export_yolo
from placer.cli import main as placer_main
from placer.kernels.loading import load_graph
from placer.placement import Placement


def test_the_export_computes_what_the_torch_model_computes(tmp_path):
    path = export_yolo(tmp_path / "yolo.onnx", size=64)
    torch.manual_seed(0)
    model = YoloDetector().eval()
    images = torch.rand(1, 3, 64, 64)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"images": images.numpy()})
    assert got.shape == (1, 4 + 80, 64 // 8 * 64 // 8 + 64 // 16 * 64 // 16 + 64 // 32 * 64 // 32)
    # seeded weights: a fresh model with the same seed is the exported one
    with torch.no_grad():
        expected = model(images).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)


def test_at_320_it_is_a_detector_of_hundreds_of_nodes(tmp_path):
    path = export_yolo(tmp_path / "yolo.onnx")
    assert [d.dim_value for d in onnx.load(path).graph.input[0].type.tensor_type.shape.dim] == [1, 3, 320, 320]
    assert len(load_graph(path).nodes) >= 200


def test_placed_over_two_devices_it_gives_onnxruntimes_outputs(tmp_path):
    path = export_yolo(tmp_path / "yolo.onnx", size=64)
    graph = load_graph(path)
    names = list(graph.nodes)
    # the first half of the ops in graph order on one device, the rest on the other
    placement = Placement(["cpu:0", "cpu:1"], {n: "cpu:0" if i < len(names) // 2 else "cpu:1"
                                               for i, n in enumerate(names)})
    placement.save(tmp_path / "placement.json")
    images = np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)
    np.savez(tmp_path / "in.npz", images=images)
    code = placer_main(["run", "--graph", str(path), "--placement", str(tmp_path / "placement.json"),
                        "--devices", "cpu:0,cpu:1", "--inputs", str(tmp_path / "in.npz"),
                        "--outputs", str(tmp_path / "out.npz")])
    assert code == 0
    (expected,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"images": images})
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["detections"], expected, rtol=1e-4, atol=1e-3)
