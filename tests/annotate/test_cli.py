"""`placer apply` and `placer show` from the command line."""

from __future__ import annotations

import hashlib
import json

import onnx
import pytest

from .conftest import placement_json
from placer.annotate.read import read_placement
from placer.cli import main


@pytest.fixture
def placement_file(tmp_path, diamond_graph):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(placement_json(diamond_graph, {"conv_a": "cpu:1", "mul": "cpu:1"}, "cpu:0",
                                              ["cpu:0", "cpu:1"])))
    return path


def test_apply_writes_the_model_and_on_cpus_alone_prints_no_onnxruntime_option(tmp_path, diamond_file,
                                                                               placement_file, capsys):
    out = tmp_path / "placed.onnx"
    assert main(["apply", "--graph", str(diamond_file), "--placement", str(placement_file), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines() == [f"wrote {out}: 9 nodes placed (cpu:0 7, cpu:1 2)"]   # no cpu(=cpu) to puzzle over
    assert read_placement(onnx.load(out)).nodes["conv_a"] == "cpu:1"


def test_apply_over_gpu_and_cpu_says_how_onnxruntime_sends_each_node_to_its_provider(tmp_path, diamond_file,
                                                                                     diamond_graph, capsys):
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps(placement_json(diamond_graph, {"conv_a": "cuda:0", "mul": "cuda:0"}, "cpu",
                                               ["cuda:0", "cpu"])))
    out = tmp_path / "placed.onnx"
    assert main(["apply", "--graph", str(diamond_file), "--placement", str(mixed), "-o", str(out)]) == 0
    hint = capsys.readouterr().out.splitlines()[-1]
    assert hint == (f"to run {out} in ONNX Runtime with each node on its device's provider, set the session option "
                    'options.add_session_config_entry("session.layer_assignment_settings", "cuda(=cuda); cpu(=cpu)")')


def test_apply_splits_into_a_folder(tmp_path, diamond_file, placement_file, capsys):
    parts = tmp_path / "parts"
    assert main(["apply", "--graph", str(diamond_file), "--placement", str(placement_file), "--split", str(parts)]) == 0
    assert "wrote 3 stage models" in capsys.readouterr().out
    assert sorted(p.name for p in parts.iterdir()) == [
        "split.json", "stage00_cpu_0.onnx", "stage01_cpu_1.onnx", "stage02_cpu_0.onnx"]


def test_apply_maps_devices(tmp_path, diamond_file, placement_file):
    out = tmp_path / "placed.onnx"
    assert main(["apply", "--graph", str(diamond_file), "--placement", str(placement_file),
                 "--map", "cpu:1=cpu:0", "-o", str(out)]) == 0
    assert set(read_placement(onnx.load(out)).nodes.values()) == {"cpu:0"}


def test_apply_without_a_placement_reuses_the_stored_one(tmp_path, diamond_file, placement_file):
    first, second = tmp_path / "a.onnx", tmp_path / "b.onnx"
    main(["apply", "--graph", str(diamond_file), "--placement", str(placement_file), "-o", str(first)])
    assert main(["apply", "--graph", str(first), "-o", str(second)]) == 0
    assert read_placement(onnx.load(second)).nodes == read_placement(onnx.load(first)).nodes


def test_apply_errors_are_one_line_with_advice(tmp_path, diamond_file, capsys):
    assert main(["apply", "--graph", str(diamond_file), "-o", str(tmp_path / "x.onnx")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "--placement" in err and "\n" not in err
    assert main(["apply", "--graph", str(diamond_file), "--device", "cpu"]) == 2
    assert "-o PLACED.onnx" in capsys.readouterr().err


def test_apply_refuses_a_placement_for_another_graph(tmp_path, diamond_file, diamond_graph, capsys):
    path = tmp_path / "other.json"
    path.write_text(json.dumps(placement_json(diamond_graph, {}, "cpu", ["cpu"], sha256="0" * 64)))
    assert main(["apply", "--graph", str(diamond_file), "--placement", str(path), "-o", str(tmp_path / "x.onnx")]) == 2
    assert "made for another graph" in capsys.readouterr().err


def test_show_prints_a_row_per_device_and_draws(tmp_path, diamond_file, placement_file, capsys):
    out = tmp_path / "placed.onnx"
    main(["apply", "--graph", str(diamond_file), "--placement", str(placement_file), "-o", str(out)])
    capsys.readouterr()
    picture = tmp_path / "placement.png"
    assert main(["show", "--graph", str(out), "-o", str(picture)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("9 nodes on 2 devices (placement stored in the model)")
    assert lines[2].split()[:2] == ["cpu:0", "7"] and lines[3].split()[:2] == ["cpu:1", "2"]
    assert "bytes crossing devices per step: 3.0 KiB" in lines
    assert picture.stat().st_size > 0


def test_show_json_of_a_placement_file(diamond_file, placement_file, capsys):
    assert main(["show", "--graph", str(diamond_file), "--placement", str(placement_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["device"] for d in data["devices"]] == ["cpu:0", "cpu:1"]
    assert data["bytes_crossing"] == 3 * 1024


def test_show_without_a_stored_placement_says_what_to_do(diamond_file, capsys):
    assert main(["show", "--graph", str(diamond_file)]) == 2
    assert "placer apply" in capsys.readouterr().err


def test_measure_runs_the_placement_stored_by_apply(tmp_path, diamond_file, placement_file, capsys):
    out = tmp_path / "placed.onnx"
    main(["apply", "--graph", str(diamond_file), "--placement", str(placement_file), "-o", str(out)])
    capsys.readouterr()
    assert main(["measure", "--graph", str(out), "--warmup", "0", "--repeats", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["placement"] == {"cpu:0": 7, "cpu:1": 2} and result["ok"] and result["step_time"] > 0


def test_apply_counts_the_nodes_it_places_as_its_devices_do(tmp_path, capsys):
    """A Constant weight is a node of the file, placed with its reader: the total counts it as the
    per-device figures do."""
    from onnx import TensorProto, helper

    weight = helper.make_node("Constant", [], ["c"], name="weight",
                              value=helper.make_tensor("c", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0]))
    nodes = [weight, helper.make_node("Add", ["x", "c"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    out = tmp_path / "placed.onnx"
    assert main(["apply", "--graph", str(model), "--device", "cpu:0", "-o", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"wrote {out}: 3 nodes placed (cpu:0 3)"
    assert len(onnx.load(out).graph.node) == 3


# sha256 of what `placer apply` wrote for `placement_file` before plans could be applied: a placement
# file must go on writing exactly that (recompute only for a change meant to alter placed files; the
# graph hash's version 2 changed only the placer.graph.sha256 it records)
PLACED_BEFORE_PLANS = "0aa5b1d67f94a5d9e39884f070cedc351d893f8eb0b26bc1805ab13fef1f40cc"


def test_apply_writes_a_placement_file_byte_for_byte_as_before_plans(tmp_path, diamond_file, placement_file):
    out = tmp_path / "placed.onnx"
    assert main(["apply", "--graph", str(diamond_file), "--placement", str(placement_file), "-o", str(out)]) == 0
    assert hashlib.sha256(out.read_bytes()).hexdigest() == PLACED_BEFORE_PLANS
