"""A PaddlePaddle-style file (input x: [?, 3, ?, ?]) bound with --input-shape in every command
that takes it: each '?' is bound by its position, so 48 and 192 do not conflict."""

from __future__ import annotations

import json

import onnx
import pytest

from placer.cli import main

PADDLE_SHAPE = "x=1x3x48x192"   # the OCR-style input of issue 11: the two '?' spatial dims differ
TWO_CPUS = ["--devices", "cpu:0[threads=1],cpu:1[threads=1]"]


def _run(capsys, *argv) -> str:
    code = main(list(argv))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_inspect_binds_each_anonymous_dimension_by_position(paddle_cls, capsys):
    data = json.loads(_run(capsys, "inspect", "--graph", str(paddle_cls), "--input-shape", PADDLE_SHAPE, "--json"))
    assert data["inputs"][0]["shape"] == [1, 3, 48, 192]
    conv = next(n for n in data["nodes"] if n["op_type"] == "Conv")
    assert conv["output_shapes"] == [[1, 4, 48, 192]]


def test_measure_run_and_show_take_the_paddle_file(paddle_cls, capsys):
    shape = ["--graph", str(paddle_cls), "--input-shape", PADDLE_SHAPE]
    assert json.loads(_run(capsys, "measure", *shape, "--device", "cpu", "--warmup", "0", "--repeats", "1",
                           "--json"))["step_time"] > 0
    assert "probs  float32 [1, 5]" in _run(capsys, "run", *shape, "--device", "cpu")
    assert json.loads(_run(capsys, "show", *shape, "--device", "cpu", "--json"))["devices"][0]["nodes"] == 9


def test_apply_writes_the_paddle_file_placed(paddle_cls, tmp_path, capsys):
    out = tmp_path / "placed.onnx"
    _run(capsys, "apply", "--graph", str(paddle_cls), "--input-shape", PADDLE_SHAPE, "--device", "cpu", "-o", str(out))
    placed = onnx.load(str(out))
    assert len(placed.graph.node) == 9


def test_compare_takes_the_paddle_file(paddle_cls, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    _run(capsys, "compare", "--graph", str(paddle_cls), "--input-shape", PADDLE_SHAPE, *TWO_CPUS,
         "--placers", "single", "--warmup", "0", "--min-rounds", "6", "--max-rounds", "6", "--no-plot", "--out", str(tmp_path / "c"))
    table = (tmp_path / "c" / "table.txt").read_text()
    assert "single:cpu:0" in table and "single:cpu:1" in table


def test_train_takes_the_paddle_file(paddle_cls, tmp_path, capsys):
    run = tmp_path / "run"
    _run(capsys, "train", "--graph", str(paddle_cls), "--input-shape", PADDLE_SHAPE, *TWO_CPUS, "--reward", "simulated",
         "--cost-model", "analytic", "--samples", "4", "--samples-per-update", "4", "--hidden-size", "16",
         "--no-progress", "--no-compare", "--run-dir", str(run))
    assert (run / "placement.json").is_file()


@pytest.mark.parametrize("command", ["inspect", "measure", "run", "show", "apply", "compare", "train"])
def test_an_unbound_anonymous_dimension_is_one_line_naming_the_input(paddle_cls, tmp_path, command, capsys):
    extra = {"inspect": [], "measure": ["--device", "cpu"], "run": ["--device", "cpu"], "show": ["--device", "cpu"],
             "apply": ["--device", "cpu", "-o", str(tmp_path / "p.onnx")], "compare": ["--out", str(tmp_path / "c")],
             "train": ["--run-dir", str(tmp_path / "r")]}[command]
    assert main([command, "--graph", str(paddle_cls), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unnamed dynamic dimension (input 'x', axis 2" in err
    assert "--input-shape x=1x3x1x1" in err


def test_the_environment_takes_a_path_and_input_shapes_for_the_paddle_file(paddle_cls):
    import gymnasium

    import placer  # noqa: F401  (registers the environment)

    env = gymnasium.make("placer/DevicePlacement-v0", graph=paddle_cls, devices=["cpu:0", "cpu:1"], n_groups=2,
                         input_shapes={"x": (1, 3, 48, 192)})
    env.reset(seed=0)
    *_, info = env.step(env.action_space.sample())
    assert info["measurement"]["ok"] and info["measurement"]["step_time"] > 0
