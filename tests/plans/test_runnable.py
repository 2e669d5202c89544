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
from placer.placement import Placement
from placer.program.training import OptimizerSpec, TrainingSpec
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
    return export_model(name, **{**ZOO_SMALL.get(name, {}), "batch": 2})   # llama: tiny by default


def outside(name: str, tmp_path) -> onnx.ModelProto:
    export = {"mobilenet": export_mobilenet, "yolo": export_yolo}[name]
    return onnx.load(str(export(tmp_path / f"{name}.onnx", size=64, batch=2)))


NO_BIAS_FREE_LINEAR = {"inception_v3", "resnet50", "rnnlm", "mobilenet", "yolo"}
MODELS = [(zoo, name) for name in (*ZOO_SMALL, "llama")] + [(outside, name) for name in ("mobilenet", "yolo")]


def feeds_for(graph: OpGraph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {i.name: (rng.integers(0, 10, i.shape) if i.dtype.startswith("int") else rng.standard_normal(i.shape))
            .astype(i.dtype) for i in graph.inputs}


def run_plan(graph: OpGraph, plan: Plan, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    made = runnable(graph, plan)
    executor = PlacedExecutor(made.graph, made.placement, as_devices(list(plan.devices)))
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
    value = helper.make_tensor_value_info
    proto = helper.make_model(helper.make_graph(nodes, "g", [value("x", TensorProto.FLOAT, [4, 6])],
                                                [value("y", TensorProto.FLOAT, [4, 6])]),
                              opset_imports=[helper.make_opsetid("", 17)])
    graph = load_graph(proto)
    split = lambda s: OpPlan(TWO, (Shard(0),), s)   # noqa: E731
    plan = Plan(list(TWO), {"relu": split((Shard(0),)), "shape": split((REPLICATE,)), "ones": OpPlan(TWO[:1]),
                            "add": OpPlan(TWO[:1])}, graph.sha256)
    x = np.arange(24, dtype=np.float32).reshape(4, 6) - 12
    np.testing.assert_array_equal(run_plan(graph, plan, {"x": x})["y"], np.maximum(x, 0) + 1)


def merge_matmul_cut(seed: int):
    """[4, 5, 8] -> Reshape [20, 8] -> MatMul w [8, 6] -> Reshape [4, 5, 6]; the graph, w and a seeded rng."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(np.array(v, dtype=np.int64), n)
             for n, v in (("rows", [20, 8]), ("back", [4, 5, 6]))]
    w = rng.standard_normal((8, 6)).astype(np.float32)
    inits.append(numpy_helper.from_array(w, "w"))
    nodes = [helper.make_node("Reshape", ["x", "rows"], ["r"], name="merge"),
             helper.make_node("MatMul", ["r", "w"], ["m"], name="mm"),
             helper.make_node("Reshape", ["m", "back"], ["y"], name="cut")]
    value = helper.make_tensor_value_info
    proto = helper.make_model(helper.make_graph(nodes, "g", [value("x", TensorProto.FLOAT, [4, 5, 8])],
                                                [value("y", TensorProto.FLOAT, [4, 5, 6])], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    return load_graph(proto), w, rng


def test_a_reshape_merging_the_batch_with_the_steps_stays_split_where_n_divides_both():
    """[4, 5, 8] -> Reshape [20, 8] -> MatMul -> Reshape [4, 5, 6]: data parallel on two devices
    with no op replicated (so no collective), on three (4 rows do not cut in three) replicated."""
    graph, w, rng = merge_matmul_cut(1)
    plan = data_parallel(graph, TWO)
    assert plan.extra["placer"]["replicated"] == [] and all(op.outputs == (Shard(0),) for op in plan.ops.values())
    assert data_parallel(graph, ("cpu:0", "cpu:1", "cpu:2")).extra["placer"]["replicated"] == ["merge", "cut"]
    x = rng.standard_normal((4, 5, 8)).astype(np.float32)
    want = (x.reshape(20, 8) @ w).reshape(4, 5, 6)
    np.testing.assert_allclose(run_plan(graph, plan, {"x": x})["y"], want, rtol=1e-5, atol=1e-5)


def test_a_reshape_merging_the_batch_with_the_steps_is_cut_by_speed_in_proportion():
    """The same reshapes with the batch cut 3:1 (a fast device beside a slow one): the merged rows
    cut 15:5, device k's rows the runs of its samples, so the shards chain with no collective and
    the outputs are the whole model's; a cut whose rows round out of proportion (2:1 gives samples
    3:1 but rows 13:7) is refused."""
    from placer.errors import PlacerError
    from placer.plans.lower import lower

    graph, w, rng = merge_matmul_cut(2)

    def cut(parts):
        even = data_parallel(graph, TWO)
        ops = {n: OpPlan(op.devices, tuple(Shard(0, parts) if isinstance(x, Shard) else x for x in op.inputs),
                         tuple(Shard(0, parts) for _ in op.outputs)) for n, op in even.ops.items()}
        return Plan(list(TWO), ops, graph.sha256)

    plan = cut((3, 1))
    lowered = lower(graph, plan)
    assert sorted(lowered.graph.tensors[t].shape for t in lowered.graph.tensors if t.startswith("r@")) == [(5, 8), (15, 8)]
    x = rng.standard_normal((4, 5, 8)).astype(np.float32)
    want = (x.reshape(20, 8) @ w).reshape(4, 5, 6)
    np.testing.assert_allclose(run_plan(graph, plan, {"x": x})["y"], want, rtol=1e-5, atol=1e-5)
    with pytest.raises(PlacerError, match="not a split its maths allows"):   # the reshape cannot map 3:1 to 13:7
        lower(graph, cut((2, 1)))


def test_three_devices_cut_by_speed_keep_the_reshapes_split_where_their_parts_map_them():
    """Evenly, 4 samples do not cut in three (the reshapes replicated, above); cut 2:1:1 as by
    speed, the merged rows cut 10:5:5, each device's rows the runs of its samples: no op replicated,
    no collective, and the outputs the whole model's."""
    from placer.plans.lower import lower

    graph, w, rng = merge_matmul_cut(3)
    three, parts = ("cpu:0", "cpu:1", "cpu:2"), (2, 1, 1)
    even = data_parallel(graph, three, parts)
    assert even.extra["placer"]["replicated"] == []
    ops = {n: OpPlan(op.devices, tuple(Shard(0, parts) if isinstance(x, Shard) else x for x in op.inputs),
                     tuple(Shard(0, parts) for _ in op.outputs)) for n, op in even.ops.items()}
    plan = Plan(list(three), ops, graph.sha256)
    lowered = lower(graph, plan)
    assert not lowered.helpers
    assert sorted(lowered.graph.tensors[t].shape for t in lowered.graph.tensors if t.startswith("r@")) == \
        [(5, 8), (5, 8), (10, 8)]
    x = rng.standard_normal((4, 5, 8)).astype(np.float32)
    want = (x.reshape(20, 8) @ w).reshape(4, 5, 6)
    np.testing.assert_allclose(run_plan(graph, plan, {"x": x})["y"], want, rtol=1e-5, atol=1e-5)


def train_three_steps(graph: OpGraph, plan: Plan | None, feeds: dict[str, np.ndarray], spec: TrainingSpec) -> list:
    """Per step: (loss, gradients, updated weights) of `graph` under `plan` (None: one device),
    each weight whole (a plan's slices joined)."""
    if plan is None:
        executor = PlacedExecutor(graph, Placement.single_device(list(graph.nodes), "cpu:0", graph.sha256),
                                  as_devices(["cpu:0"]), training=spec)
        made, step_feeds = None, feeds
    else:
        made = runnable(graph, plan, training=True)
        executor = PlacedExecutor(made.graph, made.placement, as_devices(list(TWO)), training=made.training(spec))
        step_feeds = made.feeds(feeds)
    steps = []
    with executor:
        for _ in range(3):
            got = executor.run(step_feeds)
            # copies: `updated:` is the live parameter, which the next step updates in place
            arrays = {k: v.detach().cpu().numpy().copy() for k, v in got.items() if k != "loss"}
            split = (lambda prefix: made.weights(got, prefix)) if made else \
                (lambda prefix: {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)})
            steps.append((float(got["loss"]), split("grad:"), split("updated:")))
    return steps


# the quick ones in the default run (every kind of split among them); the CNNs (minutes) under `long`
QUICK_TO_TRAIN = {"transformer", "llama"}   # the tied embedding; GQA, RMSNorm, rotary


@pytest.mark.parametrize("make, model", [m if m[1] in QUICK_TO_TRAIN else pytest.param(*m, marks=pytest.mark.long)
                                         for m in MODELS], ids=[m for _, m in MODELS])
def test_every_plan_trains_as_one_device_does_for_three_steps(make, model, tmp_path):
    # one transformer layer holds every op and split kind of two (the outputs test above runs two), in half the ops
    graph = load_graph(export_model(model, **{**ZOO_SMALL[model], "batch": 2, "layers": 1}) if model == "transformer"
                       else make(model, tmp_path))
    feeds = feeds_for(graph)
    spec = TrainingSpec(optimizer=OptimizerSpec("sgd", lr=1e-3))   # small steps: a trajectory float32 can follow
    want = train_three_steps(graph, None, feeds, spec)
    plans = {**PLANS, **({"megatron": lambda g: tensor_parallel(g, TWO)} if model in ("transformer", "llama") else {})}
    for kind, make_plan in plans.items():
        got = train_three_steps(graph, make_plan(graph), feeds, spec)
        for step, ((loss, grads, weights), (loss_1, grads_1, weights_1)) in enumerate(zip(got, want)):
            where = f"{model}, {kind} plan, step {step}"
            assert loss == pytest.approx(loss_1, rel=1e-4), where
            assert grads.keys() == grads_1.keys() and weights.keys() == weights_1.keys(), where
            # float32 sums in another order: a first conv's gradient (a sum of many terms that
            # mostly cancel) is off by up to 1e-2 of its own norm, and a deep net's drift grows a
            # little each step (ResNet-50's third: 1.4e-3 of the largest gradient), so each is held
            # to 5e-3 of the largest gradient; a collective left out or a slice off by one is off by all of it
            largest = max(np.linalg.norm(g) for g in grads_1.values())
            for name in grads_1:
                off = np.linalg.norm(grads[name] - grads_1[name]) / largest
                assert off < 5e-3, f"{where}: the gradient of {name} is off by {off:.1e} of the largest gradient"
                np.testing.assert_allclose(weights[name], weights_1[name], rtol=1e-4, atol=1e-5,
                                           err_msg=f"{where}: {name} updated")


@pytest.mark.parametrize("model", ["gate", "decode", "scan"])
def test_plans_of_models_with_control_flow_give_onnx_runtimes_outputs(model, tmp_path):
    """An If, a Loop and a Scan (whose bodies read tensors of the graph around them, some of them
    renamed by the plan) replicated or whole beside split ops."""
    import controlflow

    proto = controlflow.scan_model() if model == "scan" else controlflow.export_scripted(model, tmp_path / "m.onnx")[1]
    graph = load_graph(proto)
    feeds = controlflow.feeds(proto, 0, scale=3.0)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    for kind, make_plan in PLANS.items():
        got = run_plan(graph, make_plan(graph), feeds)
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=f"{model}, {kind} plan: {name}")


def test_pipeline_stages_each_data_parallel_run_in_both_engines(tmp_path):
    """Two stages, each split on the batch over two devices: a stage's pieces go on to the next
    stage's devices as they are, so no device talks to another of its stage, and ONNX Runtime runs
    the plan as a placed graph (a session per device's partition) as the torch engine does."""
    from placer.engines.onnxruntime.placed import OrtPlacement
    from placer.plans.engine import talks
    from placer.plans.pipeline_data import pipeline_data
    from testgraphs import tiny_conv_file

    proto = onnx.load(str(tiny_conv_file(tmp_path / "tiny.onnx", batch=4)))
    graph = load_graph(proto)
    four = ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    order = list(graph.nodes)
    def halves(g, heads):   # the first half of the ops on the first stage
        return Placement(list(heads), {n: heads[i >= len(order) // 2] for i, n in enumerate(order)}, g.sha256)

    plan = pipeline_data(graph, four, halves)
    assert not talks(graph, plan)
    feeds = feeds_for(graph)
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    made = runnable(graph, plan)
    with OrtPlacement(made.graph, made.placement, as_devices(four)) as session:
        np.testing.assert_allclose(made.outputs(session.run_arrays(made.feeds(feeds)))["y"], want, atol=1e-5)
    with PlacedExecutor(made.graph, made.placement, as_devices(four)) as executor:
        np.testing.assert_allclose(made.outputs(executor.run(made.feeds(feeds)))["y"], want, atol=1e-5)
