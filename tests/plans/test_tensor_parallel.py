"""Megatron's tensor-parallel plan: MLP and attention blocks found in the graph, split column then row."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.costmodel.roofline import RooflineCostModel
from placer.errors import PlacerError
from placer.placers.partitioners import pipeline_dp
from placer.plans.data_parallel_by_speed import data_parallel_by_speed
from placer.plans.pipeline_data import pipeline_data
from placer.graph.load import load_graph
from placer.hardware import load_cluster
from placer.jobs.compare import simulated_comparison
from placer.devices import as_devices
from placer.plans.layout import PARTIAL, REPLICATE, Shard
from placer.plans.lower import lower
from placer.plans.pricing import simulate_plan
from placer.plans.rules import splits
from placer.plans.tensor_parallel import tensor_parallel
from placer.plans.training import simulate_training
from placer.program.training import TrainingSpec
from graphs.export import export_model
from plancases import BANDWIDTH, LATENCY, conv_net, pairwise_cluster

TWO = ["cuda:0", "cuda:1"]


def mlp(batch: int = 4, steps: int = 8, d: int = 16, hidden: int = 64):
    """x [batch, steps, d] -> MatMul w1 -> Add b1 -> Relu -> MatMul w2 -> Add b2 -> y, as torch exports a Linear."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("w1", (d, hidden)), ("b1", (hidden,)), ("w2", (hidden, d)), ("b2", (d,)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Add", ["b1", "h"], ["hb"], name="fc1_bias"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["o"], name="fc2"),
             helper.make_node("Add", ["b2", "o"], ["y"], name="fc2_bias")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, steps, d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, steps, d])], weights)
    return load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.fixture(scope="module")
def gpt():
    """The zoo's transformer, one block, a small vocabulary: 12 heads of 64, MLP 3072."""
    from graphs.export import export_model
    return load_graph(export_model("transformer", batch=2, seq_len=8, layers=1, vocab=64))


def test_an_mlp_splits_its_first_layer_by_columns_and_its_second_by_rows_then_all_reduces():
    graph = mlp()
    plan = tensor_parallel(graph, TWO)
    layouts = {n: (op.inputs, op.outputs) for n, op in plan.ops.items()}
    assert layouts["fc1"] == ((REPLICATE, Shard(1)), (Shard(2),))
    assert layouts["fc1_bias"] == ((Shard(0), Shard(2)), (Shard(2),))
    assert layouts["relu"] == ((Shard(2),), (Shard(2),))
    assert layouts["fc2"] == ((Shard(2), Shard(0)), (PARTIAL,))
    assert layouts["fc2_bias"] == ((REPLICATE, REPLICATE), (REPLICATE,))   # after the all-reduce, as Megatron adds it
    assert plan.extra["placer"]["blocks"] == 1
    lowered = lower(graph, plan)
    assert {lowered.graph.nodes[f"fc1@{d}"].output_shapes for d in TWO} == {((4, 8, 32),)}
    ring = [n for n in lowered.helpers if n.startswith("o/all-reduce")]
    assert len(ring) == 2 * 2 * 2   # a reduce-scatter and an all-gather step per device, their joins
    # every GPU's op takes its launch and nothing more: the all-reduce's two ring copies of half
    # the sum each are what stands between the row layer and the bias
    half = 4 * 8 * 16 * 4 / 2
    step = simulate_plan(graph, plan, pairwise_cluster(2)).step_time
    assert step >= 2 * (LATENCY + half / BANDWIDTH)


def test_attention_is_split_by_heads_from_the_qkv_projection_to_the_output_projection(gpt):
    plan = tensor_parallel(gpt, TWO)
    ops = plan.ops
    assert plan.extra["placer"]["blocks"] == 2   # the attention and the MLP
    assert ops["/blocks.0/attn/qkv/MatMul"].inputs == (REPLICATE, Shard(1))
    assert ops["/blocks.0/attn/MatMul"].outputs == (Shard(1),)   # scores [batch, heads, steps, steps] by heads
    assert ops["/blocks.0/attn/proj/MatMul"].outputs == (PARTIAL,)
    assert ops["/blocks.0/fc_proj/MatMul"].outputs == (PARTIAL,)
    # the fused QKV's contiguous columns hold no whole heads: gathered before its Split, never split wrongly
    assert plan.extra["placer"]["gathered"] == ["/blocks.0/attn/Split"]
    assert ops["/blocks.0/attn/Split"].inputs[0] == REPLICATE
    for name in ("/ln_f/LayerNormalization", "/wte/Gather"):   # whole on each, as Megatron's
        assert all(x == REPLICATE for x in ops[name].inputs + ops[name].outputs)
    assert plan.extra["placer"]["head"] == "/Gemm" and ops["/Gemm"].outputs == (Shard(1),)   # the vocabulary split
    lowered = lower(gpt, plan)
    assert lowered.graph.nodes["/blocks.0/attn/MatMul@cuda:1"].output_shapes == ((2, 6, 8, 8),)


def test_heads_are_not_split_where_the_devices_do_not_divide_them(gpt):
    """12 heads over 5 devices: a reshape from hidden to heads would cut a head; only the MLP is split."""
    reshape = gpt.nodes["/blocks.0/attn/Reshape"]
    assert any(s.name == "axis 2 as 2" for s in splits(reshape, gpt, 4))
    assert not any(s.name == "axis 2 as 2" for s in splits(reshape, gpt, 5))
    plan = tensor_parallel(gpt, [f"cuda:{i}" for i in range(5)])
    assert plan.extra["placer"]["blocks"] == 1
    assert plan.ops["/blocks.0/attn/proj/MatMul"].outputs == (REPLICATE,)


def test_a_cnn_has_no_block_to_split_and_its_comparison_says_so():
    with pytest.raises(PlacerError, match="has none that splits"):
        tensor_parallel(conv_net(batch=8), TWO)
    cluster = load_cluster("4xa100-nvlink")
    comparison = simulated_comparison(conv_net(batch=8), as_devices(cluster.device_specs()), cluster, ["single"],
                                      None, None, 0, plans=("tensor_parallel",))
    assert comparison.row("tensor_parallel") is None
    assert any(n.startswith("tensor_parallel: not simulated") for n in comparison.notes)


def test_a_transformer_comparison_has_a_tensor_parallel_row_with_memory_per_device(gpt):
    cluster = load_cluster("4xa100-nvlink")
    comparison = simulated_comparison(gpt, as_devices(cluster.device_specs()), cluster, ["single"], None, None, 0,
                                      plans=("tensor_parallel",))
    row = comparison.row("tensor_parallel")
    assert row.measurement.ok and row.placement is None and "Megatron" in row.note
    peaks = row.measurement.peak_memory
    # each GPU holds a quarter of the blocks' weights and all of the rest
    assert all(0 < peaks[f"cuda:{i}"] < gpt.total_param_bytes for i in range(4))


def test_a_training_comparison_prices_megatrons_pipeline_datas_and_the_by_speed_plans_training_steps():
    """On a training step each plan row is the plan's own training step simulated (its gradients'
    collectives and optimizer state included), as DDP's row is, not a note; the batch cut by speed
    over V100s and K40s too (its reshapes merging the batch with the steps cut in proportion)."""
    graph = load_graph(export_model("transformer", batch=8, seq_len=8, layers=2, vocab=64))
    spec = TrainingSpec()
    for name, plans in (("4xa100-nvlink", ("tensor_parallel", "pipeline_data")),
                        ("v100-k40-mix", ("data_parallel_by_speed",))):
        cluster = load_cluster(name)
        devices, gpus = as_devices(cluster.device_specs()), [d.name for d in cluster.devices if d.model.kind == "cuda"]
        cost = RooflineCostModel(cluster, graph)
        built = {"tensor_parallel": lambda: tensor_parallel(graph, gpus),
                 "pipeline_data": lambda: pipeline_data(graph, gpus, partial(pipeline_dp, cost=cost)),
                 "data_parallel_by_speed": lambda: data_parallel_by_speed(graph, gpus, cost)}
        training = simulated_comparison(graph, devices, cluster, [], None, None, 0, plans=plans, training=spec)
        inference = simulated_comparison(graph, devices, cluster, [], None, None, 0, plans=plans)
        for plan in plans:
            row = training.row(plan)
            assert row is not None and row.measurement.ok, training.notes
            assert row.step_time == simulate_training(graph, built[plan](), cluster, spec).step_time
            assert row.step_time > 2 * inference.row(plan).step_time   # forward, backward and update
