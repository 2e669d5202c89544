"""The human expert's placement (Mirhoseini et al. 2017): a recurrent network one layer per GPU,
anything else whole on the fastest device."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from testgraphs import ZOO_SMALL, branches

import graphs
from placer.costmodel.simulator import AnalyticCostModel
from placer.costmodel.training_costs import TrainingStepCosts
from placer.graph.load import load_graph
from placer.placers import PLACERS, expert
from placer.placers.expert import module_paths, recurrent_layers
from placer.program.training import TrainingSpec

GPUS = [f"cuda:{i}" for i in range(4)]


@pytest.fixture(scope="module")
def rnnlm(tmp_path_factory):
    path = graphs.export("rnnlm", tmp_path_factory.mktemp("zoo") / "rnnlm.onnx", **ZOO_SMALL["rnnlm"])
    return load_graph(path)


def devices_of(graph, placement, module):
    """The devices of the nodes under `module` (a module path, every call of it)."""
    paths = module_paths(graph)
    return {placement.nodes[n] for n, path in paths.items() if path[:len(module)] == module}


def test_rnnlm_gets_one_layer_per_gpu(rnnlm):
    p = expert(rnnlm, GPUS, AnalyticCostModel(GPUS))
    layers = {name: devices_of(rnnlm, p, (name,)) for name in ("embedding", "cells.0", "cells.1", "decoder")}
    assert all(len(d) == 1 for d in layers.values()), layers   # every layer whole on one GPU, all steps
    assert [d.pop() for d in layers.values()] == GPUS   # in the order they run: a GPU each
    info = p.extra["placer"]
    assert info["rule"] == "one layer per GPU" and info["layers"] == 4 and info["found_by"] == "module names"
    assert len(set(p.nodes.values())) == 4
    assert set(p.nodes) == set(rnnlm.nodes) | set(rnnlm.constants)


def test_layers_go_round_the_gpus_in_turn_and_the_cpu_is_no_gpu(rnnlm):
    devices = ["cpu:0", "cuda:0", "cuda:1"]
    p = PLACERS["expert"].place(rnnlm, devices, AnalyticCostModel(devices), None)
    assert "cpu:0" not in p.nodes.values()
    assert devices_of(rnnlm, p, ("cells.0",)) == {"cuda:1"} and devices_of(rnnlm, p, ("cells.1",)) == {"cuda:0"}
    cpus = ["cpu:0", "cpu:1"]   # no GPU at all: every device takes layers in turn
    q = expert(rnnlm, cpus, AnalyticCostModel(cpus))
    assert devices_of(rnnlm, q, ("cells.0",)) == {"cpu:1"} and devices_of(rnnlm, q, ("cells.1",)) == {"cpu:0"}


def lstm_model() -> onnx.ModelProto:
    """Embedding -> LSTM -> Squeeze -> LSTM -> Squeeze -> MatMul -> Softmax, with ONNX LSTM ops."""
    hidden, vocab, steps, batch = 8, 20, 3, 2
    rng = np.random.default_rng(0)
    w = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(w(vocab, hidden), "emb"), numpy_helper.from_array(w(hidden, vocab), "proj"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    for k in (1, 2):
        inits += [numpy_helper.from_array(w(1, 4 * hidden, hidden), f"W{k}"),
                  numpy_helper.from_array(w(1, 4 * hidden, hidden), f"R{k}")]
    nodes = [helper.make_node("Gather", ["emb", "tokens"], ["x"], name="embedding"),
             helper.make_node("LSTM", ["x", "W1", "R1"], ["y1"], name="lstm1", hidden_size=hidden),
             helper.make_node("Squeeze", ["y1", "axis1"], ["x2"], name="squeeze1"),
             helper.make_node("LSTM", ["x2", "W2", "R2"], ["y2"], name="lstm2", hidden_size=hidden),
             helper.make_node("Squeeze", ["y2", "axis1"], ["x3"], name="squeeze2"),
             helper.make_node("MatMul", ["x3", "proj"], ["logits"], name="projection"),
             helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1)]
    tokens = helper.make_tensor_value_info("tokens", TensorProto.INT64, [steps, batch])
    probs = helper.make_tensor_value_info("probs", TensorProto.FLOAT, [steps, batch, vocab])
    graph = helper.make_graph(nodes, "lstm", [tokens], [probs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_recurrent_ops_start_their_layers():
    graph = load_graph(lstm_model())
    layers, found_by = recurrent_layers(graph)
    assert found_by == "recurrent ops"
    assert layers == [["embedding"], ["lstm1", "squeeze1"], ["lstm2", "squeeze2"], ["projection", "softmax"]]
    p = expert(graph, GPUS, AnalyticCostModel(GPUS))
    assert [p.nodes[n] for n in ("embedding", "lstm1", "squeeze1", "lstm2", "projection", "softmax")] == \
        ["cuda:0", "cuda:1", "cuda:1", "cuda:2", "cuda:3", "cuda:3"]


@pytest.mark.parametrize("fast", ["cuda:0", "cuda:1", "cpu:0"])
def test_a_cnn_runs_whole_on_the_fastest_device(fast):
    graph = load_graph(branches(3, 2))
    devices = ["cpu:0", "cuda:0", "cuda:1"]
    assert recurrent_layers(graph) == ([], "")
    cost = AnalyticCostModel(devices, speeds={fast: 1e15}, mem_bandwidths={fast: 1e14}, launch_overhead={fast: 1e-7})
    p = expert(graph, devices, cost)
    assert set(p.nodes.values()) == {fast}
    times = p.extra["placer"]["single_device_step_times"]
    assert p.extra["placer"]["device"] == fast == min(times, key=times.get)


def test_the_fastest_device_is_judged_on_the_training_step():
    """On the training objective the single-device steps compared are training steps."""
    graph = load_graph(branches(3, 2))
    devices = ["cuda:0", "cuda:1"]
    # cuda:1 computes faster, cuda:0 moves memory faster: the forward pass runs faster on cuda:1,
    # a training step (its updates pass over every weight and gradient) on cuda:0
    cost = AnalyticCostModel(devices, speeds={"cuda:0": 1e10, "cuda:1": 4e10},
                             mem_bandwidths={"cuda:0": 1e12, "cuda:1": 3e9})
    forward = expert(graph, devices, cost)
    training = expert(graph, devices, TrainingStepCosts(graph, devices, cost, TrainingSpec()))
    assert set(forward.nodes.values()) == {"cuda:1"} and set(training.nodes.values()) == {"cuda:0"}
    times = training.extra["placer"]["single_device_step_times"]
    assert times["cuda:0"] < times["cuda:1"]
