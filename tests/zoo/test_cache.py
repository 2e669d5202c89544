"""`graphs.resolve`: existing files pass through, zoo names are exported into the cache once."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import onnx
import pytest

import graphs
import graphs.cache
from placer.errors import PlacerError


@pytest.fixture
def cache(monkeypatch, zoo_cache):
    monkeypatch.setenv("PLACER_CACHE", str(zoo_cache))
    return zoo_cache


def test_an_existing_file_is_returned_unchanged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inception_v3.onnx").write_bytes(b"the user's own file")
    assert str(graphs.resolve("inception_v3.onnx")) == "inception_v3.onnx"
    assert (tmp_path / "inception_v3.onnx").read_bytes() == b"the user's own file"


def test_a_missing_zoo_file_is_exported_into_the_cache(cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = graphs.resolve("inception_v3.onnx")
    assert path.is_file() and path.name == "inception_v3.onnx"
    assert cache in path.parents and path.parent.parent == cache / "zoo"
    onnx.checker.check_model(onnx.load(path))
    assert not list(tmp_path.iterdir())  # nothing written where the user stands
    assert [p.name for p in path.parent.iterdir()] == ["inception_v3.onnx"]  # no temporary files left


def test_the_cached_export_is_reused(cache, monkeypatch):
    first = graphs.resolve("inception_v3.onnx")
    monkeypatch.setattr(graphs.cache, "export", lambda *a, **k: pytest.fail("exported again"))
    assert graphs.resolve("inception_v3.onnx") == first
    assert graphs.resolve("inception_v3") == first  # the bare name works too


def test_the_first_use_export_is_a_progress_line_not_a_warning(tmp_path, monkeypatch, capsys, caplog):
    def fake_export(name, target):
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_bytes(b"an export")

    monkeypatch.setenv("PLACER_CACHE", str(tmp_path))
    monkeypatch.setattr(graphs.cache, "export", fake_export)
    with caplog.at_level(logging.DEBUG):
        path = graphs.resolve("rnnlm.onnx")
        graphs.resolve("rnnlm.onnx")   # cached: says nothing
    assert capsys.readouterr().err == f"exporting zoo model rnnlm to {path} (first use)\n"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_cache_follows_placer_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path))
    assert graphs.cache_dir() == tmp_path / "zoo"
    monkeypatch.delenv("PLACER_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert graphs.cache_dir() == tmp_path / "home" / ".cache" / "placer" / "zoo"


def test_an_unknown_missing_file_names_itself_and_the_zoo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PlacerError) as caught:
        graphs.resolve("mymodel.onnx")
    message = str(caught.value)
    assert "mymodel.onnx does not exist" in message
    assert all(f"{name}.onnx" in message for name in graphs.names())
    assert "\n" not in message


def test_a_zoo_name_inside_a_folder_is_a_missing_user_file(tmp_path):
    # a path with folders is a file the user meant to have, not a request for the zoo
    with pytest.raises(PlacerError, match="does not exist"):
        graphs.resolve(str(tmp_path / "inception_v3.onnx"))


def test_a_folder_is_refused(tmp_path):
    with pytest.raises(PlacerError, match="is a folder"):
        graphs.resolve(str(tmp_path))


def test_an_interrupted_write_leaves_neither_file_nor_temporary(tmp_path, monkeypatch):
    from graphs.export import write_atomic

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        write_atomic(b"data", tmp_path / "sub" / "model.onnx")
    assert list((tmp_path / "sub").iterdir()) == []


def test_a_path_object_is_accepted(tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(b"x")
    assert graphs.resolve(model) == model


def test_an_unwritable_cache_is_a_one_line_error(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("PLACER_CACHE", str(blocker))
    monkeypatch.setattr(graphs.cache, "export", lambda name, path: graphs.export("rnnlm", path, batch=1, seq_len=1, vocab=5))
    with pytest.raises(PlacerError, match="cannot write the zoo cache .*PLACER_CACHE"):
        graphs.resolve("rnnlm.onnx")
