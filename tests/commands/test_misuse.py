"""What a user can get wrong on the command line: every case is one line on stderr (no traceback)
and exit code 2, found before any work, so nothing is left in the folder it ran in.

A new misuse is one line in CASES: the command line as typed, the models and files of `files` named
by {placeholders}, and a distinctive part of the one line it must print (mostly its start)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.cli import main
from testgraphs import branches

CASES = [
    # output paths: tried before the model runs
    (["run", "--graph", "{small}", "--outputs", "{a_file}/dir/o.npz"], "error: cannot write --outputs {a_file}/dir/o.npz"),
    # --seed: every command that takes one
    (["run", "--graph", "{small}", "--seed", "-1"], "error: --seed must be from 0 to 2147483647, not -1"),
    (["measure", "--graph", "{small}", "--seed", "-1"], "error: --seed must be from 0 to 2147483647, not -1"),
    (["compare", "--graph", "{small}", "--seed", "-1"], "error: --seed must be from 0 to 2147483647, not -1"),
    (["place", "--graph", "{small}", "--cluster", "2xt4-pcie", "--out", "p.json", "--seed", "-1"], "error: --seed must"),
    (["train", "--graph", "{small}", "--seed", "-1"], "error: --seed must be from 0 to 2147483647, not -1"),
    (["pretrain", "--seed", "-1"], "error: --seed must be from 0 to 2147483647, not -1"),
    (["run", "--graph", "{small}", "--seed", "2147483648"], "error: --seed must be from 0 to 2147483647, not 2147483648"),
    # inputs no machine holds, refused before numpy tries to allocate them
    (["run", "--graph", "{dynamic}", "--input-shape", "x=1000000000000000x4"], "error: the inputs take "),
    # --chains: every chain is simulated at once
    (["place", "--graph", "{small}", "--cluster", "2xt4-pcie", "--out", "p.json", "--chains", "1000000000"],
     "error: --chains must be from 0 to 4096, not 1000000000: every chain is simulated"),
    # a model ONNX Runtime cannot load, with the silero_vad.onnx error (LSTM: First input tensor must have
    # rank 3), here from an If whose branch not taken has an LSTM on a 2-D input
    (["run", "--graph", "{if_lstm}", "--inputs", "{if_lstm_inputs}", "--engine", "onnxruntime"],
     "run it with placer's own engine instead (--engine torch)"),
    # a placement on a device not among --devices
    (["measure", "--graph", "{small}", "--placement", "{on_cpu2}", "--devices", "cpu:0,cpu:1"],
     "error: the placement uses device(s) ['cpu:2'] that are not among ['cpu:0', 'cpu:1']"),
    (["run", "--graph", "{small}", "--placement", "{on_cpu2}", "--devices", "cpu:0,cpu:1"],
     "error: the placement uses device(s) ['cpu:2'] that are not among ['cpu:0', 'cpu:1']"),
    # a 0-sized dimension, wherever it comes from (the model, --input-shape, --inputs): 1 or more is asked for
    (["run", "--graph", "{zero}"], "error: input 'x' has shape [0, 4]: a dimension of size 0"),
    (["run", "--graph", "{dynamic}", "--input-shape", "x=0x4"], "error: --input-shape 'x=0x4' has a dimension of 0"),
    (["run", "--graph", "{dynamic}", "--inputs", "{empty_inputs}"], "error: input 'x' has shape [0, 4]: a dimension of size 0"),
    # an opset newer than onnx's
    (["run", "--graph", "{opset99}"], "error: {opset99} uses ONNX opset 99, newer than opset"),
    (["inspect", "--graph", "{opset99}"], "error: {opset99} uses ONNX opset 99, newer than opset"),
    # a learner's option the chosen learner does not read
    (["train", "--graph", "{small}", "--cluster", "2xt4-pcie", "--policy", "pretrained", "--lr", "0.1"],
     "error: --lr: the seq2seq learner's options, which the graph policy does not read"),
    # a polish in the simulator where the figures are measured, or without a sample count
    (["train", "--graph", "{small}", "--samples", "8", "--polish", "0.5"],
     "error: --polish moves in the simulator, so every figure must be simulated"),
    (["train", "--graph", "{small}", "--cluster", "2xt4-pcie", "--reward", "simulated", "--budget", "5s",
      "--polish", "0.5"], "error: --polish spends a share of a sample count: add --samples N"),
    # options that would do nothing
    (["train", "--graph", "{small}", "--ray-address", "auto", "--samples", "4"], "error: --ray-address needs --workers N"),
    # --resume with nothing to resume
    (["train", "--graph", "{small}", "--run-dir", "run", "--resume", "--samples", "4"],
     "error: no checkpoint in run to resume from"),
    (["pretrain", "--run-dir", "run", "--resume", "--updates", "1"], "error: run holds no checkpoint.pt to resume"),
]


def _relu(name: str, shape: list, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _if_lstm() -> onnx.ModelProto:
    """y = Relu(x) if flag else LSTM(x): the LSTM wants a 3-D input, which ONNX Runtime checks in
    both branches when it loads the model; placer's engine runs the branch the flag takes."""
    hidden, width = 3, 4
    weights = [numpy_helper.from_array(np.full((1, 4 * hidden, n), 0.1, np.float32), name)
               for name, n in (("W", width), ("R", hidden))]
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["n", width])])
    other = helper.make_graph([helper.make_node("LSTM", ["x", "W", "R"], ["e"], hidden_size=hidden)], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["n", width])])
    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], name="if", then_branch=then, else_branch=other)], "if_lstm",
        [helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", width])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="session")
def files(tmp_path_factory) -> dict[str, str]:
    """What the cases name: small models, sample inputs, a placement, a plain file."""
    from placer.kernels.loading import load_graph
    from placer.placement import Placement

    where = tmp_path_factory.mktemp("misuse")
    models = {"small": branches(2, 2, width=8, batch=4), "dynamic": _relu("dynamic", ["n", 4]),
              "zero": _relu("zero", [0, 4]), "opset99": _relu("opset99", [2, 4], opset=99), "if_lstm": _if_lstm()}
    paths = {}
    for name, model in models.items():
        paths[name] = str(where / f"{name}.onnx")
        onnx.save(model, paths[name])
    paths["if_lstm_inputs"] = str(where / "if_lstm.npz")
    np.savez(paths["if_lstm_inputs"], flag=np.array(True), x=np.ones((2, 4), np.float32))
    paths["empty_inputs"] = str(where / "empty.npz")
    np.savez(paths["empty_inputs"], x=np.ones((0, 4), np.float32))
    graph = load_graph(paths["small"])
    paths["on_cpu2"] = str(where / "on_cpu2.json")
    Placement.single_device(list(graph.nodes), "cpu:2", graph.sha256).save(paths["on_cpu2"])
    paths["a_file"] = str(where / "a_file")
    (where / "a_file").write_text("")
    return paths


@pytest.mark.parametrize("argv, expected", CASES, ids=[" ".join(argv) for argv, _ in CASES])
def test_a_misuse_is_one_line_and_exit_code_2_before_any_work(argv, expected, files, tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)   # whatever a case writes or leaves behind shows up here
    code = main([a.format(**files) for a in argv])
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert expected.format(**files) in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_run_outputs_into_a_folder_still_to_make_are_written(files, tmp_path, capfd):
    """`run --outputs /missing/dir/o.npz` where the folders can be made: check_writable said yes,
    so the outputs are written there (they were lost to a traceback after the run)."""
    out = tmp_path / "missing" / "dir" / "o.npz"
    assert main(["run", "--graph", files["small"], "--outputs", str(out)]) == 0
    with np.load(out) as written:
        assert written["y"].shape == (4, 16)
