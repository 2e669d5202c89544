"""`placer apply` never holds a model's external weights: the annotations need the graph alone, so the
weights' file is copied beside the written model file to file (issue 42: apply on a model of many GB)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from peaks import linux_only, peak_growth
from placer.cli import main

NBYTES = 16384 * 1024 * 4   # a 64 MiB embedding table


def embedding_model(folder):
    """ids -> Gather from a [16384, 1024] float table kept in table.bin beside the model (sparse:
    zeros, no disk); the model's path."""
    table = TensorProto(name="table", data_type=TensorProto.FLOAT, dims=[16384, 1024],
                        data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "table.bin"), ("offset", "0"), ("length", str(NBYTES))):
        table.external_data.add(key=key, value=value)
    graph = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["y"], name="embed"),
                               helper.make_node("Relu", ["y"], ["z"], name="relu")], "embed",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8, 1024])],
                              initializer=[table])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "embed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with open(folder / "table.bin", "wb") as f:
        f.truncate(NBYTES)
    return path


@linux_only
def test_apply_copies_the_weights_file_to_file_and_never_holds_them(tmp_path):
    model, out = embedding_model(tmp_path / "in"), tmp_path / "out" / "placed.onnx"
    grew = peak_growth("""
        import sys
        import graphs, placer.kernels.loading   # imported first: their memory is not the model's
        from placer.cli import main
    """, "assert main(['apply', '--graph', sys.argv[1], '--device', 'cpu:0', '-o', sys.argv[2]]) == 0",
        str(model), str(out))
    assert grew < NBYTES / 4, f"apply's peak grew by {grew / 2**20:.0f} MiB for {NBYTES / 2**20:.0f} MiB of weights"
    data = out.parent / "placed.onnx.data"
    assert data.stat().st_size == NBYTES
    written = onnx.load(str(out), load_external_data=False)
    (table,) = written.graph.initializer
    assert {e.key: e.value for e in table.external_data}["location"] == "placed.onnx.data"
    assert all(any(p.key == "placer.device" for p in n.metadata_props) for n in written.graph.node)


def test_apply_says_in_one_line_that_a_missing_weights_file_is_needed(tmp_path, capsys):
    model = embedding_model(tmp_path / "in")
    (model.parent / "table.bin").unlink()
    assert main(["apply", "--graph", str(model), "--device", "cpu:0", "-o", str(tmp_path / "placed.onnx")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "table.bin, which is missing" in err[-1]
