"""Every zoo model, exported to ONNX, computes with the kernels what onnxruntime computes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from placer.kernels.reference import run_model

ort = pytest.importorskip("onnxruntime")

# Small variants where the zoo allows it, so that the whole module stays well under 30 s.
_SMALL = {
    "inception_v3": {"batch": 1},
    "resnet50": {"batch": 1},
    "rnnlm": {"batch": 2, "seq_len": 6, "vocab": 500},
    "nmt": {"batch": 2, "seq_len": 5, "vocab": 500},
    "transformer": {"batch": 1, "seq_len": 8, "layers": 2, "vocab": 500},
}


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in inits:
            continue
        tt = value.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        feeds[value.name] = (rng.standard_normal(shape).astype(dtype) if dtype.kind == "f"
                             else rng.integers(0, 10, shape).astype(dtype))
    return feeds


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_SMALL))
def test_zoo_model_matches_onnxruntime(name):
    from graphs.export import export_model

    import graphs

    assert set(_SMALL) == set(graphs.names()), "a zoo model is missing from this test"
    model = export_model(name, **_SMALL[name])
    feeds = _feeds(model)
    ours = run_model(model, feeds)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    theirs = ort.InferenceSession(model.SerializeToString(), options,
                                  providers=["CPUExecutionProvider"]).run(None, feeds)
    for (out, a), b in zip(ours.items(), theirs):
        scale = max(float(np.abs(b).max()), 1e-6)
        assert a.shape == b.shape
        assert float(np.abs(a - b).max()) / scale < 1e-4, out
