"""--inputs on every command that loads, runs or profiles a model, on a model whose inputs' values
decide the work (an If on an int64 sample rate, `controlflow.RateGate`): it loads, runs placed
with ONNX Runtime's outputs, profiles the branch taken, trains and splits given --inputs; without
them every command gets one line that names the node and --inputs."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from controlflow import divide_by_count, export_rate_gate, rate_inputs
from placer.cli import main
from placer.kernels.loading import load_graph
from placer.placement import Placement


@pytest.fixture(scope="module")
def vad(tmp_path_factory):
    """The model, its inputs at 16000 and 8000 Hz, and a placement putting the If on cpu:0 and
    everything after it on cpu:1."""
    folder = tmp_path_factory.mktemp("vad")
    path = export_rate_gate(folder / "vad.onnx")
    files = {}
    for sr in (16000, 8000):
        np.savez(folder / f"in{sr}.npz", **rate_inputs(sr))
        files[sr] = folder / f"in{sr}.npz"
    graph = load_graph(path, inputs=files[16000])
    after = list(graph.nodes)[list(graph.nodes).index("/If") + 1:]
    Placement(["cpu:0", "cpu:1"], {n: "cpu:1" if n in after else "cpu:0" for n in graph.nodes},
              graph.sha256).save(folder / "split.json")
    return path, files, folder / "split.json"


def _onnxruntime(path, feeds) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


@pytest.mark.parametrize("engine", ["torch", "onnxruntime"])
@pytest.mark.parametrize("sr", [16000, 8000])
def test_run_placed_on_two_devices_gives_onnxruntimes_outputs(vad, tmp_path, sr, engine):
    path, files, placement = vad
    out = tmp_path / "out.npz"
    assert main(["run", "--graph", str(path), "--inputs", str(files[sr]), "--placement", str(placement),
                 "--engine", engine, "--outputs", str(out)]) == 0
    expected = _onnxruntime(path, rate_inputs(sr))
    with np.load(out) as got:
        assert got["prob"].shape == (4 if sr == 16000 else 2, 1)
        for name, value in expected.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)


def test_inspect_says_which_inputs_decided_the_shapes(vad, capsys):
    path, files, _ = vad
    assert main(["inspect", "--graph", str(path), "--inputs", str(files[8000])]) == 0
    text = capsys.readouterr().out
    assert "prob                     2x1" in text
    assert "4 tensors, found by a real run on the inputs given (x, state, sr) and generated (none)" in text
    assert main(["inspect", "--graph", str(path), "--inputs", str(files[8000]), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)["shapes_from_run"]
    assert facts["given"] == ["x", "state", "sr"] and facts["generated"] == [] and "prob" in facts["tensors"]


@pytest.mark.parametrize("sr, branch", [(16000, "then branch"), (8000, "else branch")])
def test_the_profile_costs_the_branch_the_inputs_take(vad, tmp_path, sr, branch):
    path, files, _ = vad
    out = tmp_path / "profile.json"
    assert main(["measure", "--graph", str(path), "--inputs", str(files[sr]), "--device", "cpu", "--repeats", "1",
                 "--warmup", "0", "--profile", str(out)]) == 0
    profile = json.loads(out.read_text())
    assert not profile["failures"]
    assert list(profile["control_flow"]["/If"]) == [branch]


@pytest.mark.parametrize("reward", ["simulated", "real"])
def test_train_with_inputs(vad, tmp_path, monkeypatch, reward):
    path, files, _ = vad
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    assert main(["train", "--graph", str(path), "--inputs", str(files[8000]), "--devices", "cpu:0,cpu:1",
                 "--reward", reward, "--samples", "4", "--samples-per-update", "2", "--run-dir", str(run_dir),
                 "--no-progress", "--no-compare", "--repeats", "1", "--warmup", "0",
                 *(["--cost-model", "analytic"] if reward == "real" else [])]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["best_step_time"] > 0 and (run_dir / "placement.json").is_file()


def test_apply_splits_and_the_stages_give_onnxruntimes_outputs(vad, tmp_path):
    import placer.engines.onnxruntime

    path, files, placement = vad
    parts = tmp_path / "parts"
    assert main(["apply", "--graph", str(path), "--inputs", str(files[8000]), "--placement", str(placement),
                 "--split", str(parts)]) == 0
    runner = placer.engines.onnxruntime.load(parts)
    got = runner.run(rate_inputs(8000))
    runner.close()
    for name, value in _onnxruntime(path, rate_inputs(8000)).items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("command", [
    ["inspect"], ["show", "--device", "cpu"], ["run", "--device", "cpu"], ["measure", "--device", "cpu"],
    ["apply", "--device", "cpu", "-o", "placed.onnx"], ["compare", "--devices", "cpu:0,cpu:1"],
    ["train", "--devices", "cpu:0,cpu:1", "--samples", "2"]])
def test_without_inputs_every_command_says_the_inputs_were_generated(vad, tmp_path, monkeypatch, capsys, command):
    path, files, _ = vad
    monkeypatch.chdir(tmp_path)
    assert main([command[0], "--graph", str(path), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "node '/If' (If) failed" in err
    assert "generated values of x, state, sr" in err and "--inputs FILE.npz" in err
    # ... and with them, the command's options take it further
    if command[0] in ("inspect", "show", "apply"):
        assert main([command[0], "--graph", str(path), "--inputs", str(files[16000]), *command[1:]]) == 0


@pytest.mark.parametrize("command", [["run"], ["inspect"], ["measure"], ["run", "--micro-batches", "2"]])
def test_an_array_that_names_no_input_is_one_line_exit_2(tmp_path, capsys, command):
    onnx.save(divide_by_count(), tmp_path / "m.onnx")
    name = "n#2" if "--micro-batches" in command else "nope"
    np.savez(tmp_path / "f.npz", **{name: np.array(2)})
    assert main([command[0], "--graph", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "f.npz"),
                 *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and repr(name) in err


def test_a_step_that_fails_on_generated_inputs_says_so_and_runs_on_real_ones(tmp_path, capsys, monkeypatch):
    onnx.save(divide_by_count(), tmp_path / "m.onnx")   # static shapes: it loads without running
    graph = ["--graph", str(tmp_path / "m.onnx"), "--device", "cpu"]
    assert main(["run", *graph]) == 1
    assert "generated values of x, n" in capsys.readouterr().err
    assert main(["measure", *graph, "--json"]) == 1
    reason = json.loads(capsys.readouterr().out)["reason"]
    assert "ZeroDivisionError" in reason and "generated values of x, n" in reason and "--inputs" in reason
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    assert main(["compare", *graph[:2], "--devices", "cpu:0,cpu:1", "--out", str(tmp_path / "cmp")]) == 2
    err = capsys.readouterr().err
    assert "profiling failed on every device" in err and "generated values of x, n" in err
    np.savez(tmp_path / "n.npz", n=np.array(2))
    assert main(["run", *graph, "--inputs", str(tmp_path / "n.npz"), "--outputs", str(tmp_path / "y.npz")]) == 0
    capsys.readouterr()
    assert main(["measure", *graph, "--inputs", str(tmp_path / "n.npz"), "--repeats", "1"]) == 0
