"""`placer show`: the accounted peak memory per device, for a forward pass or a training step."""

import json

from placer.cli import main

from .test_compare import _tiny_model_file

PARAM_BYTES = 2 * 8 * 3 * 3 * 3 * 4   # w1 and w2 of the tiny model


def _peaks(capsys, model, *extra):
    assert main(["show", "--graph", str(model), "--device", "cpu", "--json", *extra]) == 0
    data = json.loads(capsys.readouterr().out)
    return {d["device"]: d["peak_memory"] for d in data["devices"]}, data["objective"]


def test_show_counts_gradients_saved_activations_and_optimizer_state_on_the_training_objective(tmp_path, capsys):
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    inference, objective = _peaks(capsys, model)
    assert objective == "inference" and inference["cpu"] > PARAM_BYTES
    sgd, objective = _peaks(capsys, model, "--objective", "training")
    adam, _ = _peaks(capsys, model, "--objective", "training", "--optimizer", "adam")
    assert objective == "training"
    # momentum: one copy of the parameters resident, plus gradients and activations kept for the backward
    assert sgd["cpu"] > inference["cpu"] + PARAM_BYTES
    assert adam["cpu"] == sgd["cpu"] + PARAM_BYTES   # Adam keeps two moments, momentum one
    assert main(["show", "--graph", str(model), "--device", "cpu", "--objective", "training"]) == 0
    out = capsys.readouterr().out
    assert "peak memory" in out and "gradients, saved activations and optimizer state included" in out
