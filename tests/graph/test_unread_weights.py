"""Weights are never read where shapes are enough (issue 42): inspect, place and the simulated jobs
load a model without its large external weights, or without its external data files at all (a
one-line note); the graph hash needs no weight read, and hashes recorded before it still match."""

from __future__ import annotations


import numpy as np
import onnx
import pytest
from onnx import TensorProto, external_data_helper, helper, numpy_helper

from placer.cli import main
from placer.errors import PlacerError
from placer.graph.identity import graph_sha256, legacy_graph_sha256
from placer.graph.slim import SMALL_INITIALIZER_BYTES, is_large
from placer.jobs.settings import HardwareSettings
from placer.kernels.loading import load_graph
from placer.placement import Placement
from peaks import linux_only, peak_growth

# What placer.graph/1 (every weight by value) made of `tiny_model()`, before shapes stood for large weights
LEGACY_SHA256 = "1018e2e10b20bf5558676b7aa2a849a7f33c2a27117684bdd8920bcae30115f6"


def tiny_model(weight_shape=(64, 64), target=(8, 8), scale=1.0) -> onnx.ModelProto:
    """x[1, 64] -> MatMul w (16 KB: large) -> Add b (small) -> Reshape to `target` (a small constant) -> Relu."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(scale * rng.standard_normal(weight_shape).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(weight_shape[1]).astype(np.float32), "b")
    shape = numpy_helper.from_array(np.array(target, dtype=np.int64), "target")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["a"], name="add"),
             helper.make_node("Reshape", ["a", "target"], ["r"], name="reshape"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(target))],
                              initializer=[w, b, shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def save_external(model: onnx.ModelProto, folder, size_threshold: int = 0) -> str:
    """`model` saved with every initializer (of `size_threshold` bytes or more) in weights.bin beside it."""
    folder.mkdir(exist_ok=True)
    path = folder / "tiny.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=size_threshold)
    return str(path)


@pytest.fixture
def tiny(tmp_path):
    return save_external(tiny_model(), tmp_path / "tiny")


@pytest.fixture
def no_large_reads(monkeypatch):
    refuse_large_reads(monkeypatch)


def refuse_large_reads(monkeypatch):
    """Reading a large weight's external data fails, as a 140 GB one would."""
    read = external_data_helper.load_external_data_for_tensor

    def refuse_large(tensor, base_dir):
        if is_large(tensor):
            raise OSError(f"read the large weight {tensor.name}")
        return read(tensor, base_dir)

    monkeypatch.setattr(external_data_helper, "load_external_data_for_tensor", refuse_large)


def test_inspect_place_and_show_read_no_large_weight(tiny, tmp_path, no_large_reads, capsys):
    assert main(["inspect", "--graph", tiny]) == 0
    out = tmp_path / "placement.json"
    assert main(["place", "--graph", tiny, "--cluster", "2xt4-pcie", "-o", str(out)]) == 0
    assert set(Placement.load(out).nodes) == {"mm", "add", "reshape", "relu"}
    assert main(["show", "--graph", tiny, "--placement", str(out), "--cluster", "2xt4-pcie"]) == 0
    assert "note:" not in capsys.readouterr().err   # the files are there: nothing to note
    graph = load_graph(tiny, weights="shapes")
    assert graph.nodes["relu"].output_shapes == ((8, 8),)   # the small shape constant was read
    assert graph.total_param_bytes == 64 * 64 * 4 + 64 * 4 + 2 * 8


def test_missing_external_data_is_a_note_and_still_places_and_shows(tmp_path, capsys):
    tiny = save_external(tiny_model(), tmp_path / "tiny", size_threshold=1024)   # onnx's default: w alone
    (tmp_path / "tiny" / "weights.bin").unlink()
    assert main(["inspect", "--graph", tiny]) == 0
    out = tmp_path / "placement.json"
    assert main(["place", "--graph", tiny, "--cluster", "2xt4-pcie", "-o", str(out)]) == 0
    assert main(["show", "--graph", tiny, "--placement", str(out)]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(notes) == 3 and all(n.startswith("note: the weights of") and "weights.bin" in n for n in notes)
    assert "Traceback" not in "".join(notes)
    # what runs the model needs them: a one-line error, not a crash on a missing value
    with pytest.raises(PlacerError, match="missing: weights.bin"):
        load_graph(tiny)
    with pytest.raises(PlacerError, match="missing: weights.bin"):
        load_graph(tiny, weights="shapes").initializer_array("w")


def test_a_shape_constant_left_unread_is_an_error_that_says_why(tiny, tmp_path):
    (tmp_path / "tiny" / "weights.bin").unlink()
    with pytest.raises(PlacerError, match="the real run that finds them needs the weights"):
        load_graph(tiny, weights="shapes")


def test_weights_left_unread_are_read_when_a_value_is_needed(tiny):
    lean, full = load_graph(tiny, weights="shapes"), load_graph(tiny)
    assert external_data_helper.uses_external_data(next(t for t in lean.model.graph.initializer if t.name == "w"))
    np.testing.assert_array_equal(lean.initializer_array("w"), full.initializer_array("w"))


def test_the_hash_needs_no_weights_and_sees_shapes_and_small_constants(tiny, tmp_path):
    loaded = load_graph(tiny)
    assert load_graph(tiny, weights="shapes").sha256 == loaded.sha256 == graph_sha256(tiny_model())
    large_only = save_external(tiny_model(), tmp_path / "large", size_threshold=SMALL_INITIALIZER_BYTES + 1)
    assert graph_sha256(onnx.load(large_only, load_external_data=False)) == loaded.sha256
    assert graph_sha256(tiny_model(scale=2.0)) == loaded.sha256   # a large weight's value is not what it computes
    reshaped = tiny_model()
    reshaped.graph.initializer[0].dims[:] = [32, 128]   # the same bytes, another shape
    assert graph_sha256(reshaped) != loaded.sha256
    assert graph_sha256(tiny_model(target=(4, 16))) != loaded.sha256
    changed = save_external(tiny_model(target=(16, 4)), tmp_path / "other")
    assert load_graph(changed, weights="shapes").sha256 != loaded.sha256


def test_the_legacy_hash_is_the_one_placer_recorded_before(tiny):
    assert legacy_graph_sha256(tiny_model()) == LEGACY_SHA256
    assert load_graph(tiny, weights="shapes").legacy_sha256 == LEGACY_SHA256   # weights read one at a time


def test_a_placement_with_the_legacy_hash_is_accepted(tiny, tmp_path, capsys):
    nodes = ["mm", "add", "reshape", "relu"]
    for recorded, accepted in ((LEGACY_SHA256, True), ("0" * 64, False)):
        path = tmp_path / "p.json"
        Placement.single_device(nodes, "cpu", recorded).save(path)
        assert (main(["show", "--graph", tiny, "--placement", str(path)]) == 0) == accepted
    assert "made for another graph" in capsys.readouterr().err


def test_a_run_folder_with_the_legacy_hash_is_resumed(tiny, tmp_path):
    from placer.policy.checkpoint import load_checkpoint, save_checkpoint
    from placer.policy.run_start import RunStart

    graph = load_graph(tiny, weights="shapes")
    RunStart.begin(tmp_path, {"graph_sha256": LEGACY_SHA256, "seed": 0})
    save_checkpoint(tmp_path, {"graph_sha256": LEGACY_SHA256, "seed": 0})
    now = {"graph_sha256": graph.sha256, "seed": 0}
    assert RunStart.resume(tmp_path, now, graph).data["identity"] == now
    assert load_checkpoint(tmp_path, now, graph=graph)["seed"] == 0
    with pytest.raises(PlacerError, match="different seed"):
        load_checkpoint(tmp_path, {**now, "seed": 1}, graph=graph)
    save_checkpoint(tmp_path, {"graph_sha256": "0" * 64, "seed": 0})
    with pytest.raises(PlacerError, match="different graph sha256"):
        load_checkpoint(tmp_path, now, graph=graph)


def test_only_jobs_that_simulate_everything_leave_weights_unread():
    assert HardwareSettings(cluster="2xt4-pcie").weights == "shapes"
    assert HardwareSettings().weights == HardwareSettings(devices="cpu:0").weights == "load"


@linux_only
def test_inspect_memory_does_not_grow_with_the_weights(tmp_path):
    """200 MB of external weights (a sparse file: nothing to write) and inspect's peak memory stays
    far below them."""
    nbytes = 51200 * 1024 * 4
    table = TensorProto(name="table", data_type=TensorProto.FLOAT, dims=[51200, 1024],
                        data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "table.bin"), ("offset", "0"), ("length", str(nbytes))):
        table.external_data.add(key=key, value=value)
    graph = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["y"], name="embed")], "embed",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1024])],
                              initializer=[table])
    path = tmp_path / "embed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with open(tmp_path / "table.bin", "wb") as f:
        f.truncate(nbytes)
    grew = peak_growth("""
        import sys
        import graphs, placer.kernels.loading   # imported first: their memory is not the model's
        from placer.jobs.inspect import InspectSettings, inspect
        from placer.jobs.settings import ModelSettings
    """, "inspect(InspectSettings(ModelSettings(sys.argv[1])))", str(path))
    assert grew < nbytes / 10


def test_memory_is_accounted_from_the_weights_shapes_as_from_their_values(tmp_path, monkeypatch):
    """show's memory: a weight left unread counts its bytes, and so does what folds from it (a
    Transpose of it here), as when it is read."""
    from placer.engines.torch.executor import accounted_memory
    from placer.kernels.prepare import prepare

    model = tiny_model()
    model.graph.node[0].input[1] = "wt"
    model.graph.node.insert(0, helper.make_node("Transpose", ["w"], ["wt"], name="transpose"))
    path = save_external(model, tmp_path / "transposed")
    full = load_graph(path)
    placement = Placement.single_device(list(full.nodes), "cpu", full.sha256)
    read = accounted_memory(full, placement)
    refuse_large_reads(monkeypatch)
    lean = load_graph(path, weights="shapes")
    prepared = prepare(lean, weights="shapes")
    assert "transpose" in prepared.folded_nodes
    assert accounted_memory(lean, placement, prepared=prepared) == read


def test_a_small_constants_value_is_read_alone_and_a_weights_with_all_of_them(tiny, monkeypatch):
    """What the plans' rules read (a Reshape's target shape) comes without a weight read; a weight's
    value, which a real run asks for, reads the weights."""
    graph = load_graph(tiny, weights="shapes")
    refuse_large_reads(monkeypatch)
    assert graph.initializer_array("target").tolist() == [8, 8]
    with pytest.raises(PlacerError, match="read the large weight w"):
        graph.initializer_array("w")
    monkeypatch.undo()
    assert graph.initializer_array("w").shape == (64, 64)
