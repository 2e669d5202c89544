"""Plans run for real in the torch engine: every op's shards on two CPU devices, the collectives
between them as steps handed across the device threads, and the outputs equal to ONNX Runtime's on
the whole model (issue 41's equal outputs, inference), for the zoo and the outside models."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from graphs.export import export_model
from graphs.outside.mobilenet import export_mobilenet
from graphs.outside.yolo import export_yolo
from placer.devices import as_devices
from placer.engines.torch.executor import PlacedExecutor
from placer.graph.opgraph import OpGraph
from placer.kernels.loading import load_graph
from placer.plans.data_parallel import data_parallel
from placer.plans.layout import PARTIAL, REPLICATE, Shard
from placer.plans.plan import OpPlan, Plan
from placer.plans.rules import splits
from placer.plans.runnable import runnable
from placer.plans.tensor_parallel import tensor_parallel
from testgraphs import ZOO_SMALL

TWO = ("cpu:0", "cpu:1")
LINEAR = ("MatMul", "Gemm", "Conv")


def split_linear(graph: OpGraph, devices: Sequence[str], choose: Callable[[int, str], str | None],
                 rest: str) -> Plan:
    """Linear op k split as `choose(k, op_type)` names (None: as `rest` places it); every other op
    whole on the first device (`rest='whole'`) or replicated on all (`'replicated'`)."""
    ops, k = {}, 0
    for name, node in graph.nodes.items():
        wanted = choose(k, node.op_type) if node.op_type in LINEAR else None
        k += node.op_type in LINEAR
        found = [s for s in splits(node, graph, len(devices)) if s.name == wanted]
        if found:
            ops[name] = OpPlan(tuple(devices), found[0].inputs, found[0].outputs)
        else:
            ops[name] = OpPlan(tuple(devices[:1]) if rest == "whole" else tuple(devices))
    return Plan(list(devices), ops, graph.sha256)


COLUMNS = {"MatMul": "columns", "Gemm": "columns", "Conv": "output channels"}
REDUCED = {"MatMul": "reduced axis", "Gemm": "reduced axis", "Conv": "input channels"}
PLANS: dict[str, Callable[[OpGraph], Plan]] = {
    "data": lambda g: data_parallel(g, TWO),
    # each linear op split, gathered (or summed) onto one device for the ops after it
    "columns": lambda g: split_linear(g, TWO, lambda k, op: COLUMNS[op], "whole"),
    "reduced axis": lambda g: split_linear(g, TWO, lambda k, op: REDUCED[op], "whole"),
    # splits by turns with the rest replicated: ring all-gathers and all-reduces between them
    "mixed": lambda g: split_linear(g, TWO, lambda k, op: (COLUMNS, REDUCED, {})[k % 3].get(op), "replicated"),
}


def zoo(name: str, tmp_path) -> onnx.ModelProto:
    return export_model(name, **{**ZOO_SMALL[name], "batch": 2})


def outside(name: str, tmp_path) -> onnx.ModelProto:
    export = {"mobilenet": export_mobilenet, "yolo": export_yolo}[name]
    return onnx.load(str(export(tmp_path / f"{name}.onnx", size=64, batch=2)))


NO_BIAS_FREE_LINEAR = {"inception_v3", "resnet50", "rnnlm", "mobilenet", "yolo"}
MODELS = [(zoo, name) for name in ZOO_SMALL] + [(outside, name) for name in ("mobilenet", "yolo")]


def feeds_for(graph: OpGraph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {i.name: (rng.integers(0, 10, i.shape) if i.dtype.startswith("int") else rng.standard_normal(i.shape))
            .astype(i.dtype) for i in graph.inputs}


def run_plan(graph: OpGraph, plan: Plan, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    made = runnable(graph, plan)
    executor = PlacedExecutor(made.graph, made.placement, as_devices(list(TWO)))
    try:
        return made.outputs(executor.run(made.feeds(feeds)))
    finally:
        executor.close()


@pytest.mark.parametrize("make, model", MODELS, ids=[m for _, m in MODELS])
def test_every_plan_gives_onnx_runtimes_outputs(make, model, tmp_path):
    proto = make(model, tmp_path)
    graph = load_graph(proto)
    feeds = feeds_for(graph)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    for kind, make_plan in PLANS.items():
        plan = make_plan(graph)
        split = [n for n, op in plan.ops.items() if not op.whole and set(op.inputs + op.outputs) - {None}
                 and any(isinstance(x, Shard) or x == PARTIAL for x in op.inputs + op.outputs)]
        if not split:   # a sum's parts need linear ops without a bias, which some models lack
            assert kind == "reduced axis" and model in NO_BIAS_FREE_LINEAR, f"the {kind} plan of {model} splits no op"
            continue
        got = run_plan(graph, plan, feeds)
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4,
                                       err_msg=f"{model}, {kind} plan ({len(split)} ops split): output {name}")


def test_megatron_splits_run_on_the_transformer(tmp_path):
    proto = zoo("transformer", tmp_path)
    graph = load_graph(proto)
    feeds = feeds_for(graph)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)[0]
    got = run_plan(graph, tensor_parallel(graph, TWO), feeds)
    np.testing.assert_allclose(got[session.get_outputs()[0].name], want, rtol=1e-4, atol=1e-4)


def test_a_shard_of_shape_gives_the_whole_tensors_shape():
    """x -> Relu (split on the batch) -> Shape -> ConstantOfShape (whole, one device) -> Add: the
    shape must be the whole batch's, though each device's Shape reads only its slice."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Shape", ["r"], ["s"], name="shape"),
             helper.make_node("ConstantOfShape", ["s"], ["c"], name="ones",
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
             helper.make_node("Add", ["r", "c"], ["y"], name="add")]
    proto = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])]),
                              opset_imports=[helper.make_opsetid("", 17)])
    graph = load_graph(proto)
    split = lambda s: OpPlan(TWO, (Shard(0),), s)   # noqa: E731
    plan = Plan(list(TWO), {"relu": split((Shard(0),)), "shape": split((REPLICATE,)), "ones": OpPlan(TWO[:1]),
                            "add": OpPlan(TWO[:1])}, graph.sha256)
    x = np.arange(24, dtype=np.float32).reshape(4, 6) - 12
    np.testing.assert_array_equal(run_plan(graph, plan, {"x": x})["y"], np.maximum(x, 0) + 1)


def test_a_reshape_merging_the_batch_with_the_steps_stays_split_where_n_divides_both():
    """[4, 5, 8] -> Reshape [20, 8] -> MatMul -> Reshape [4, 5, 6]: data parallel on two devices
    with no op replicated (so no collective), on three (4 rows do not cut in three) replicated."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(np.array(v, dtype=np.int64), n) for n, v in (("rows", [20, 8]), ("back", [4, 5, 6]))]
    inits.append(numpy_helper.from_array(rng.standard_normal((8, 6)).astype(np.float32), "w"))
    nodes = [helper.make_node("Reshape", ["x", "rows"], ["r"], name="merge"),
             helper.make_node("MatMul", ["r", "w"], ["m"], name="mm"),
             helper.make_node("Reshape", ["m", "back"], ["y"], name="cut")]
    proto = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5, 8])],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5, 6])], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    graph = load_graph(proto)
    plan = data_parallel(graph, TWO)
    assert plan.extra["placer"]["replicated"] == [] and all(op.outputs == (Shard(0),) for op in plan.ops.values())
    assert data_parallel(graph, ("cpu:0", "cpu:1", "cpu:2")).extra["placer"]["replicated"] == ["merge", "cut"]
    x = rng.standard_normal((4, 5, 8)).astype(np.float32)
    want = (x.reshape(20, 8) @ numpy_helper.to_array(inits[2])).reshape(4, 5, 6)
    np.testing.assert_allclose(run_plan(graph, plan, {"x": x})["y"], want, rtol=1e-5, atol=1e-5)
