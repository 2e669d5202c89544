"""A plan written into an ONNX model as IR-11 sharding specs (`placer apply`), read back equal, and
drawn by `placer show`: split ops, their devices, and where the layout changes sit."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.annotate.keys import CONFIG_NAME, DEVICE_KEY, LAYOUT_KEY
from placer.annotate.write import apply_placement, save_model
from placer.cli import main
from placer.errors import PlacerError
from placer.graph.load import load_graph
from placer.plans.export import apply_plan
from placer.plans.layout import PARTIAL, Shard
from placer.plans.plan import OpPlan, Plan
from placer.plans.read_back import read_plan
from placer.plans.specs import GROUP, canonical, from_specs, to_specs


def mlp() -> onnx.ModelProto:
    """x[4,6] @ w1 -> Relu -> @ w2 -> + b -> Sigmoid (nameless) -> Neg: a column-then-row split's shape."""
    def weight(name, *shape):
        return numpy_helper.from_array(np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 10, name)

    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["p"], name="mm2"),
             helper.make_node("Add", ["p", "b"], ["s"], name="add"),
             helper.make_node("Sigmoid", ["s"], ["y"]),
             helper.make_node("Neg", ["y"], ["z"], name="neg")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 5])],
                              [weight("w1", 6, 8), weight("w2", 8, 5), weight("b", 5)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = 8
    return model


def plan_of(graph) -> Plan:
    """Shard on axes 0 and 1, a ring in reverse order, Partial, Replicate, a whole op, an op
    replicated over three devices; a measurement and a name that must come back too."""
    return Plan.from_dict({
        "format": "placer.plan/1", "graph": {"sha256": graph.sha256}, "devices": ["cpu:0", "cpu:1", "cpu:2"],
        "ops": {"mm1": {"devices": ["cpu:0", "cpu:1"], "inputs": ["Replicate()", "Shard(1)"], "outputs": ["Shard(1)"]},
                "relu": {"devices": ["cpu:1", "cpu:0"], "inputs": ["Shard(1)"], "outputs": ["Shard(1)"]},
                "mm2": {"devices": ["cpu:0", "cpu:1"], "inputs": ["Shard(1)", "Shard(0)"], "outputs": ["Partial()"]},
                "add": {"devices": ["cpu:2", "cpu:1"], "inputs": ["Shard(0)", "Replicate()"], "outputs": ["Shard(0)"]},
                "Sigmoid_0": {"devices": ["cpu:2"], "inputs": ["Replicate()"], "outputs": ["Replicate()"]},
                "neg": {"devices": ["cpu:0", "cpu:1", "cpu:2"]}},
        "measurement": {"step_time": 0.25}, "placer": {"name": "by hand"}})


@pytest.fixture
def graph():
    return load_graph(mlp())


def _specs(model: onnx.ModelProto, node: str) -> dict[str, onnx.ShardingSpecProto]:
    (proto,) = [n for n in model.graph.node if n.name == node]
    (config,) = [c for c in proto.device_configurations if c.configuration_id == CONFIG_NAME]
    return {s.tensor_name: s for s in config.sharding_spec}


def _meta(model: onnx.ModelProto, node: str) -> dict[str, str]:
    (proto,) = [n for n in model.graph.node if n.name == node]
    return {e.key: e.value for e in proto.metadata_props}


def _expected(plan: Plan) -> Plan:
    return Plan(plan.devices, {n: canonical(op) for n, op in plan.ops.items()}, plan.graph_sha256,
                plan.measurement, plan.extra)


def test_a_plan_written_to_a_file_reads_back_as_the_same_plan(tmp_path, graph):
    path = save_model(apply_plan(mlp(), plan_of(graph), graph), tmp_path / "planned.onnx")   # onnx.checker too
    back = read_plan(onnx.load(path))
    assert back == _expected(plan_of(graph))
    assert back.ops["mm2"].outputs == (PARTIAL,)


def test_the_planned_model_passes_onnx_checker_at_ir_11(graph):
    planned = apply_plan(mlp(), plan_of(graph), graph)
    assert planned.ir_version == 11
    onnx.checker.check_model(planned, full_check=True)


def test_shard_is_a_sharded_dim_of_its_axis_over_the_ops_devices_in_ring_order(graph):
    planned = apply_plan(mlp(), plan_of(graph), graph)
    w1 = _specs(planned, "mm1")["w1"]
    assert list(w1.device) == [0, 1] and len(w1.sharded_dim) == 1
    assert w1.sharded_dim[0].axis == 1 and [s.num_shards for s in w1.sharded_dim[0].simple_sharding] == [2]
    r = _specs(planned, "relu")["r"]
    assert list(r.device) == [1, 0] and r.sharded_dim[0].axis == 1
    x = _specs(planned, "add")["p"]
    assert list(x.device) == [2, 1] and x.sharded_dim[0].axis == 0


def test_replicate_is_one_device_group_and_a_whole_op_one_device(graph):
    planned = apply_plan(mlp(), plan_of(graph), graph)
    x = _specs(planned, "mm1")["x"]
    assert list(x.device) == [GROUP] and not x.sharded_dim
    assert [(e.key, list(e.value)) for e in x.index_to_device_group_map] == [(GROUP, [0, 1])]
    assert [(e.key, list(e.value)) for e in _specs(planned, "neg")["z"].index_to_device_group_map] == \
        [(GROUP, [0, 1, 2])]
    assert {t: list(s.device) for t, s in _specs(planned, "Sigmoid_0").items()} == {"s": [2], "y": [2]}
    assert _meta(planned, "Sigmoid_0")[DEVICE_KEY] == "cpu:2" and DEVICE_KEY not in _meta(planned, "mm1")


def test_partial_is_written_as_its_all_reduced_replica_with_a_layout_note(graph):
    planned = apply_plan(mlp(), plan_of(graph), graph)
    p = _specs(planned, "mm2")["p"]
    assert list(p.device) == [GROUP] and not p.sharded_dim
    assert json.loads(_meta(planned, "mm2")[LAYOUT_KEY]) == {"inputs": ["Shard(1)", "Shard(0)"],
                                                             "outputs": ["Partial()"]}
    # the note only where ONNX falls short
    assert [n.name for n in planned.graph.node if LAYOUT_KEY in _meta(planned, n.name)] == ["mm2"]


def test_a_wrong_sharded_dim_axis_reads_back_as_another_plan(graph):
    planned = apply_plan(mlp(), plan_of(graph), graph)
    _specs(planned, "mm1")["h"].sharded_dim[0].axis = 0
    assert read_plan(planned).ops["mm1"] != plan_of(graph).ops["mm1"]


def test_a_sharding_spec_that_disagrees_with_its_layout_note_is_refused(graph):
    planned = apply_plan(mlp(), plan_of(graph), graph)
    _specs(planned, "mm2")["w2"].sharded_dim[0].axis = 1
    with pytest.raises(PlacerError, match="mm2.*placer.layout.*re-run placer apply"):
        read_plan(planned)


def test_a_plan_that_splits_nothing_is_written_exactly_as_its_placement(graph):
    whole = Plan(["cpu:0", "cpu:1"], {n: OpPlan((f"cpu:{i % 2}",)) for i, n in enumerate(graph.nodes)}, graph.sha256)
    assert apply_plan(mlp(), whole, graph).SerializeToString() == \
        apply_placement(mlp(), whole.to_placement(), graph).SerializeToString()


def test_apply_then_show_draw_the_split_ops_and_where_collectives_sit(tmp_path, graph, capsys):
    model, plan_file, out = tmp_path / "mlp.onnx", tmp_path / "plan.json", tmp_path / "planned.onnx"
    onnx.save(mlp(), model)
    plan_of(graph).save(plan_file)
    assert main(["apply", "--graph", str(model), "--placement", str(plan_file), "-o", str(out)]) == 0
    assert "5 split across devices (IR-11 sharding specs), 1 whole" in capsys.readouterr().out
    assert main(["show", "--graph", str(out), "-o", str(tmp_path / "plan.png")]) == 0
    text = capsys.readouterr().out
    assert "mm2 (MatMul) over cpu:0, cpu:1: Shard(1) x Shard(0) -> Partial()" in text
    assert "p from mm2 to add: all-reduce + cut on cpu:0, cpu:1" in text   # Partial -> Shard(0) elsewhere
    assert (tmp_path / "plan.png").stat().st_size > 0
    assert main(["show", "--graph", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {c["tensor"]: c["changes"] for c in data["plan"]["layout_changes"]}["p"] == ["all-reduce", "cut"]


def test_a_plan_is_refused_where_a_placement_is_split_and_run_where_one_is_run(tmp_path, graph, capsys):
    model, plan_file, placed = tmp_path / "mlp.onnx", tmp_path / "plan.json", tmp_path / "placed.onnx"
    onnx.save(mlp(), model)
    plan_of(graph).save(plan_file)
    assert main(["apply", "--graph", str(model), "--placement", str(plan_file), "--split", str(tmp_path / "s")]) == 2
    assert "--split" in capsys.readouterr().err
    # measured from the file, and from the model apply wrote it into
    assert main(["apply", "--graph", str(model), "--placement", str(plan_file), "-o", str(placed)]) == 0
    for argv in (["--graph", str(model), "--placement", str(plan_file)], ["--graph", str(placed)]):
        capsys.readouterr()
        assert main(["measure", *argv, "--warmup", "0", "--repeats", "1"]) == 0
        assert "placement    plan of " in capsys.readouterr().out


def test_a_tensor_read_twice_in_two_layouts_comes_back_through_its_note():
    op = OpPlan(("cpu:0", "cpu:1"), (Shard(0), Shard(1)), (Shard(0),))
    specs, note = to_specs(op, ["x", "x"], ["y"], {"cpu:0": 0, "cpu:1": 1})
    assert len(specs) == 2 and note is not None   # one spec per tensor cannot say both
    assert from_specs(specs, ["x", "x"], ["y"], {0: "cpu:0", 1: "cpu:1"}, note, "mul") == op
