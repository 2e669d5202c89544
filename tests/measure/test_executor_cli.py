"""`placer run`: one step under a placement, outputs saved — two placements give the same file."""

from __future__ import annotations

import numpy as np
import onnx

from placer.cli import main
from placer.graph.load import load_graph
from placer.placement import Placement

from .conftest import branchy_model, onnxruntime_outputs


def _model_and_split(tmp_path):
    """branchy_model saved as m.onnx and a placement alternating two devices as split.json."""
    model = branchy_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    graph = load_graph(path)
    split = Placement(["cpu:0", "cpu:1"], {n: f"cpu:{i % 2}" for i, n in enumerate(graph.nodes)}, graph.sha256)
    split.save(tmp_path / "split.json")
    return model, path, graph


def test_run_saves_outputs_that_do_not_depend_on_the_placement(tmp_path, capsys):
    model, path, _ = _model_and_split(tmp_path)
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["run", "--graph", str(path), "--device", "cpu", "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(tmp_path / "a.npz")]) == 0
    assert main(["run", "--graph", str(path), "--placement", str(tmp_path / "split.json"),
                 "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "b.npz")]) == 0
    assert "probs  float32 [2, 10]" in capsys.readouterr().out
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    reference = onnxruntime_outputs(model, {"x": x})
    for name in ("probs", "a_relu"):
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a[name], reference[name], rtol=1e-4, atol=1e-5)


def test_run_without_inputs_uses_seeded_random_ones(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(branchy_model(), path)
    for name, seed in (("s0.npz", "0"), ("s0b.npz", "0"), ("s1.npz", "1")):
        assert main(["run", "--graph", str(path), "--seed", seed, "--outputs", str(tmp_path / name)]) == 0
    s0, s0b, s1 = (np.load(tmp_path / n)["a_relu"] for n in ("s0.npz", "s0b.npz", "s1.npz"))
    np.testing.assert_array_equal(s0, s0b)
    assert not np.array_equal(s0, s1)


def test_unreadable_inputs_file_is_a_user_error(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(branchy_model(), path)
    (tmp_path / "bad.npz").write_text("not numpy")
    assert main(["run", "--graph", str(path), "--inputs", str(tmp_path / "bad.npz")]) == 2
    assert "cannot read --inputs" in capsys.readouterr().err


def test_run_training_step_saves_loss_gradients_and_updated_parameters(tmp_path, capsys):
    _, path, graph = _model_and_split(tmp_path)
    np.savez(tmp_path / "labels.npz", probs=np.array([1, 4]))
    common = ["--objective", "training", "--loss", "cross_entropy", "--targets", str(tmp_path / "labels.npz"),
              "--optimizer", "adam"]
    assert main(["run", "--graph", str(path), "--device", "cpu", *common, "--outputs", str(tmp_path / "a.npz")]) == 0
    assert main(["run", "--graph", str(path), "--placement", str(tmp_path / "split.json"), *common,
                 "--outputs", str(tmp_path / "b.npz")]) == 0
    assert "grad:fc  float32 [512, 10]" in capsys.readouterr().out
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    assert sorted(a.files) == sorted(["loss"] + [f"{kind}:{p}" for kind in ("grad", "updated")
                                                 for p in ("w1", "b1", "w2", "w3", "fc")])
    for name in a.files:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-7, err_msg=name)
    # Adam's first step moves every parameter with a gradient by about lr
    step = np.abs(a["updated:fc"] - graph.initializer_array("fc"))
    assert np.allclose(step[np.abs(a["grad:fc"]) > 1e-5], 1e-3, rtol=1e-2)


def test_run_training_refuses_labels_that_fit_no_output(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(branchy_model(), path)
    np.savez(tmp_path / "labels.npz", probs=np.array([1, 4, 2]))
    assert main(["run", "--graph", str(path), "--objective", "training", "--loss", "cross_entropy",
                 "--targets", str(tmp_path / "labels.npz")]) == 2
    assert "fits no classes axis" in capsys.readouterr().err
