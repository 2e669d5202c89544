"""A zoo model over protobuf's 2 GiB is exported with its weights in a data file beside it (ONNX
external data), and reads back as the same graph. The limit is lowered here so that a small
transformer takes that path."""

from __future__ import annotations

import importlib

import onnx

import graphs
from placer.graph.load import load_graph

export_module = importlib.import_module("graphs.export")   # the package re-exports a function of that name

SMALL = {"layers": 1, "vocab": 64, "seq_len": 8}


def test_a_model_over_the_limit_keeps_its_weights_in_a_data_file_and_is_the_same_graph(tmp_path, monkeypatch):
    whole = graphs.export("transformer", tmp_path / "whole.onnx", **SMALL)
    monkeypatch.setattr(export_module, "LARGE_WEIGHT_BYTES", 10_000)
    large = graphs.export("transformer", tmp_path / "large.onnx", **SMALL)
    data = tmp_path / "large.onnx.data"
    assert data.is_file() and not (tmp_path / "whole.onnx.data").exists()
    assert data.stat().st_mode == large.stat().st_mode   # whoever may read the model may read its weights
    assert large.stat().st_size < whole.stat().st_size / 10   # the weights are not in the model file
    stored = onnx.load(str(large), load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in stored.graph.initializer)
    onnx.checker.check_model(str(large))
    assert load_graph(large).sha256 == load_graph(whole).sha256   # the same model, stored otherwise


def test_the_zoo_command_reports_the_weights_file_in_its_size(tmp_path, monkeypatch):
    from placer.jobs.zoo import ExportSettings, export

    monkeypatch.setattr(export_module, "LARGE_WEIGHT_BYTES", 10_000)
    result = export(ExportSettings("transformer", output=str(tmp_path / "t.onnx"), layers=1, vocab=64, seq_len=8))
    assert result.size_bytes == result.path.stat().st_size + (tmp_path / "t.onnx.data").stat().st_size


def test_below_the_limit_the_model_is_one_file(tmp_path):
    graphs.export("transformer", tmp_path / "t.onnx", **SMALL)
    assert [p.name for p in tmp_path.iterdir()] == ["t.onnx"]
