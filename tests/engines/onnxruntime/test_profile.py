"""Per-node profiles from ONNX Runtime's profiler, in the Profile the simulator reads."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from placer.kernels.loading import load_graph
from placer.measure.measurer import MeasureProtocol
from placer.costmodel.profile import Profile
from placer.costmodel.profiled import ProfiledCostModel
from placer.costmodel.profiler import profile_graph

from .conftest import CPUS, shape_model


def conv_relu_model():
    """Conv -> Relu (ORT fuses them into one Conv kernel named after the Relu's output) -> Sigmoid."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 8, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["r"], ["y"], name="sigmoid")]
    graph = helper.make_graph(nodes, "cr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 32, 32])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_each_node_gets_ort_s_kernel_time_and_a_fused_kernel_goes_to_its_op(tmp_path):
    graph = load_graph(conv_relu_model())
    profile = profile_graph(graph, CPUS[:2], MeasureProtocol(warmup=1, repeats=3), transfer_sizes=(1024,), engine="onnxruntime")
    assert profile.protocol["engine"] == "onnxruntime" and profile.devices == ["cpu:0", "cpu:1"]
    times = profile.op_times
    assert times["conv"]["cpu:0"] > 0 and times["sigmoid"]["cpu:0"] > 0
    assert times["relu"]["cpu:0"] == 0.0            # fused into the Conv kernel, which carries its time
    assert times["conv"]["cpu:0"] == times["conv"]["cpu:1"]   # identical devices: one class, one profile
    assert profile.step_times["cpu:0"] >= times["conv"]["cpu:0"]
    assert profile.transfer_time(1024, "cpu:0", "cpu:1") > 0
    profile.save(tmp_path / "p.json")
    assert Profile.load(tmp_path / "p.json").op_times == times
    model = ProfiledCostModel(profile)
    assert math.isfinite(model.op_time(graph.nodes["conv"], "cpu:1"))


def test_nodes_placer_folds_cost_nothing():
    graph = load_graph(shape_model())
    profile = profile_graph(graph, CPUS[:1], MeasureProtocol(warmup=0, repeats=2), transfer_sizes=(1024,), engine="onnxruntime")
    assert {"shape", "gather", "unsqueeze", "concat"} <= set(profile.folded_nodes)
    assert all(profile.op_times[n]["cpu:0"] == 0.0 for n in profile.folded_nodes)
    assert set(profile.op_times) == set(graph.nodes) and not profile.failures
