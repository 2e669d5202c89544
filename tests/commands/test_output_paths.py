"""Every output path option refuses a place it cannot write with the usual one-line error (exit
code 2), before any long work: here the model named does not even exist, and the path is
checked first."""

from __future__ import annotations

import os

import pytest

from placer.cli import main
from placer.jobs.paths import check_writable
from placer.errors import PlacerError

# The arguments up to the path, the last one the option; "MISSING" is a model file that is not there.
OUTPUTS = [
    ["train", "--graph", "MISSING", "--run-dir"],
    ["apply", "--graph", "MISSING", "--device", "cpu", "-o"],
    ["apply", "--graph", "MISSING", "--device", "cpu", "--split"],
    ["show", "--graph", "MISSING", "-o"],
    ["measure", "--graph", "MISSING", "--profile"],
    ["run", "--graph", "MISSING", "--outputs"],
    ["compare", "--graph", "MISSING", "--out"],
    ["zoo", "export", "rnnlm", "-o"],
]


def unwritable_paths(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    paths = [a_file / "inside"]                 # under a file: NotADirectoryError for everyone, root too
    if os.path.isdir("/proc"):
        paths.append("/proc/x")                 # the example: a folder nothing can be made in
    return [str(p) for p in paths]


@pytest.mark.parametrize("before", OUTPUTS, ids=[f"{o[0]} {o[-1]}" for o in OUTPUTS])
def test_an_unwritable_output_path_is_a_one_line_error_before_any_work(before, tmp_path, capsys):
    for path in unwritable_paths(tmp_path):
        argv = [a.replace("MISSING", str(tmp_path / "missing.onnx")) for a in before]
        assert main([*argv, path]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: cannot write {before[-1]} {path}: ") and err.count("\n") == 1


def test_a_folder_where_a_file_goes_and_a_file_where_a_folder_goes_are_refused(tmp_path):
    (tmp_path / "file").write_text("kept")
    with pytest.raises(PlacerError, match="-o .* is a folder; give a file path"):
        check_writable(tmp_path, "-o")
    with pytest.raises(PlacerError, match="--out .* is a file; give a folder"):
        check_writable(tmp_path / "file", "--out", folder=True)
    assert check_writable(tmp_path / "file", "-o") == tmp_path / "file"
    assert (tmp_path / "file").read_text() == "kept"


def test_checking_a_new_folder_leaves_nothing_behind(tmp_path):
    assert check_writable(tmp_path / "a" / "b", "--run-dir", folder=True) == tmp_path / "a" / "b"
    assert check_writable(tmp_path / "c" / "out.onnx", "-o") == tmp_path / "c" / "out.onnx"
    assert list(tmp_path.iterdir()) == []
