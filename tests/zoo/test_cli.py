"""`placer zoo list` and `placer zoo export`."""

from __future__ import annotations

import dataclasses

import onnx

import graphs
from placer.cli import main
from placer.jobs.zoo import LISTING, ZooEntry


def test_list_shows_every_model_with_parameters_and_input_shapes(capsys):
    assert main(["zoo", "list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["NAME", "PARAMS", "INPUTS"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == graphs.names() + graphs.onnx_names()
    assert "69.0B" in rows["llama2_70b"] and "kv_heads=8" in rows["llama2_70b"]
    assert "23.8M" in rows["inception_v3"] and "input=1x3x299x299" in rows["inception_v3"]
    assert "src_tokens=16x20 tgt_tokens=16x20" in rows["nmt"]
    assert "124.5M" in rows["transformer"] and "layers=12" in rows["transformer"]


def test_the_listing_written_out_is_the_models_own():
    """`zoo list` reads `LISTING`, so that it loads no torch; a model added or changed shows here."""
    assert list(LISTING) == [ZooEntry(name, graphs.parameter_count(name), graphs.input_shapes(name),
                                      dataclasses.asdict(graphs.get(name).options()), graphs.get(name).description)
                             for name in graphs.names() + graphs.onnx_names()]


def test_export_writes_the_model_with_the_given_options(tmp_path, capsys):
    target = tmp_path / "lm.onnx"
    assert main(["zoo", "export", "rnnlm", "-o", str(target), "--batch", "2", "--seq-len", "3", "--vocab", "50"]) == 0
    assert str(target) in capsys.readouterr().out
    dims = [d.dim_value for d in onnx.load(target).graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 3]
    same = graphs.export("rnnlm", tmp_path / "api.onnx", batch=2, seq_len=3, vocab=50)
    assert same.read_bytes() == target.read_bytes()


def test_export_defaults_to_name_dot_onnx_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["zoo", "export", "transformer", "--layers", "1", "--vocab", "20", "--seq-len", "4"]) == 0
    assert (tmp_path / "transformer.onnx").is_file()


def test_export_of_an_unknown_model_fails_in_one_line(capsys):
    assert main(["zoo", "export", "alexnet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "alexnet" in err and "inception_v3" in err


def test_export_with_an_option_the_model_lacks_fails_in_one_line(tmp_path, capsys):
    assert main(["zoo", "export", "resnet50", "--seq-len", "5", "-o", str(tmp_path / "r.onnx")]) == 2
    assert "resnet50 has no option seq_len" in capsys.readouterr().err
    assert not (tmp_path / "r.onnx").exists()


def test_export_to_an_unwritable_place_fails_in_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["zoo", "export", "rnnlm", "--batch", "1", "--seq-len", "1", "--vocab", "5",
                 "-o", str(blocker / "lm.onnx")]) == 2
    assert "cannot write" in capsys.readouterr().err
