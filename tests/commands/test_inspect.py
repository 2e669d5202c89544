"""`placer inspect`: the user's first look at a model, as text and as JSON."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from placer.cli import main


@pytest.fixture(scope="module")
def dynamic_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("inspect") / "net.onnx"
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.LazyLinear(2))
    x = torch.randn(1, 3, 8, 8)
    net(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), (x,), str(path), dynamo=False, opset_version=17, input_names=["pixels"],
                          dynamic_axes={"pixels": {0: "batch"}})
    return path


def test_inspect_prints_the_summary(dynamic_model, capsys):
    assert main(["inspect", "--graph", str(dynamic_model), "--input-shape", "pixels=5x3x8x8"]) == 0
    out = capsys.readouterr().out
    for expected in ("nodes", "parameters", "FLOPs", "activations", "critical path", "pixels", "5x3x8x8", "Conv"):
        assert expected in out


def test_inspect_json_has_nodes_and_hash(dynamic_model, capsys):
    assert main(["inspect", "--graph", str(dynamic_model), "--input-shape", "pixels=5x3x8x8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["graph"]["sha256"]) == 64
    assert data["inputs"][0]["shape"] == [5, 3, 8, 8]
    conv = next(n for n in data["nodes"] if n["op_type"] == "Conv")
    assert conv["output_shapes"] == [[5, 4, 6, 6]] and conv["name"]
    assert data["node_count"] == len(data["nodes"])


def test_inspect_hash_does_not_depend_on_bound_shapes(dynamic_model, capsys):
    hashes = []
    for batch in (1, 7):
        main(["inspect", "--graph", str(dynamic_model), "--input-shape", f"pixels={batch}x3x8x8", "--json"])
        hashes.append(json.loads(capsys.readouterr().out)["graph"]["sha256"])
    assert hashes[0] == hashes[1]


def test_inspect_unbound_dimension_is_one_line(dynamic_model, capsys):
    assert main(["inspect", "--graph", str(dynamic_model)]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--input-shape pixels=1x3x8x8" in err
