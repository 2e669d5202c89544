"""A model whose weights are all Constant nodes (as paddle2onnx writes them), some behind a Cast
from float16 or a Reshape and a literal computed from Constants, is the same model as with
initializers: same parameters, same placements of every other node, same simulated step time;
its Constant nodes (and the nodes folded with them) follow their readers in placement files,
`apply` and `--split`."""

from __future__ import annotations

import io
import random
import re
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from placer.annotate.chain import run_split
from placer.annotate.resolve import resolve_placement
from placer.annotate.summary import summarize as device_summary
from placer.annotate.split import write_split
from placer.annotate.write import apply_placement
from placer.errors import PlacerError
from placer.graph.grouping import group_graph
from placer.graph.summary import format_summary, summarize, to_json
from placer.engines.torch.executor import PlacedExecutor
from placer.kernels.loading import load_graph
from placer.costmodel.simulator import AnalyticCostModel, SimulatedMeasurer
from placer.placement import Placement
from placer.placers import PLACERS, executor_peak_memory

ort = pytest.importorskip("onnxruntime")
DEVICES = ["cpu:0", "cpu:1"]


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.c3 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        return self.fc(torch.flatten(torch.relu(self.c2(y)) * torch.sigmoid(self.c3(y)) + 0.5, 1))


def _with_initializers() -> onnx.ModelProto:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), (torch.randn(2, 3, 8, 8),), buffer, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    return onnx.load_from_string(buffer.getvalue())


def _as_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same model written the Paddle way: no initializers, a Constant node per weight."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    constants = [helper.make_node("Constant", [], [t.name], name=f"Constant_w{k}", value=t)
                 for k, t in enumerate(model.graph.initializer)]
    nodes = constants + list(out.graph.node)
    del out.graph.initializer[:], out.graph.node[:]
    out.graph.node.extend(nodes)
    onnx.checker.check_model(out)
    return out


def _folded(model: onnx.ModelProto) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """The model written the Paddle way with weights computed from Constants: every third weight a
    float16 Constant cast to float32, every third after it a flat Constant reshaped, and the 0.5
    literal Cast(1) / 2. Also the model with initializers of the same values (float16-rounded)."""
    plain = onnx.ModelProto()
    plain.CopyFrom(model)
    nodes = []
    for k, t in enumerate(plain.graph.initializer):
        w = numpy_helper.to_array(t)
        if k % 3 == 0:
            t.CopyFrom(numpy_helper.from_array(w.astype(np.float16).astype(np.float32), t.name))
            nodes += [helper.make_node("Constant", [], [f"{t.name}_h"], name=f"Constant_w{k}",
                                       value=numpy_helper.from_array(w.astype(np.float16))),
                      helper.make_node("Cast", [f"{t.name}_h"], [t.name], name=f"Cast_w{k}", to=TensorProto.FLOAT)]
        elif k % 3 == 1:
            nodes += [helper.make_node("Constant", [], [f"{t.name}_flat"], name=f"Constant_w{k}",
                                       value=numpy_helper.from_array(w.reshape(-1))),
                      helper.make_node("Constant", [], [f"{t.name}_shape"], name=f"Constant_s{k}",
                                       value=numpy_helper.from_array(np.array(w.shape, np.int64))),
                      helper.make_node("Reshape", [f"{t.name}_flat", f"{t.name}_shape"], [t.name], name=f"Reshape_w{k}")]
        else:
            nodes.append(helper.make_node("Constant", [], [t.name], name=f"Constant_w{k}", value=t))
    paddle = onnx.ModelProto()
    paddle.CopyFrom(plain)
    for node in paddle.graph.node:
        if node.op_type == "Constant" and numpy_helper.to_array(node.attribute[0].t).size == 1:   # the 0.5
            half = node.output[0]
            nodes += [helper.make_node("Constant", [], ["one"], name="Constant_one", value_int=1),
                      helper.make_node("Cast", ["one"], ["one_f"], name="Cast_one", to=TensorProto.FLOAT),
                      helper.make_node("Constant", [], ["two"], name="Constant_two", value_float=2.0),
                      helper.make_node("Div", ["one_f", "two"], [half], name="Div_half")]
    nodes += [n for n in paddle.graph.node if n.output[0] != half]
    del paddle.graph.initializer[:], paddle.graph.node[:]
    paddle.graph.node.extend(nodes)
    onnx.checker.check_model(paddle)
    return plain, paddle


@pytest.fixture(scope="module", params=["constants", "folded"])
def pair(request):
    plain = _with_initializers()
    if request.param == "constants":
        paddle = _as_constants(plain)
    else:
        plain, paddle = _folded(plain)
    return (plain, load_graph(plain)), (paddle, load_graph(paddle))


def _x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)


def test_constant_weights_count_as_parameters_and_are_no_nodes(pair):
    (_, plain), (paddle, graph) = pair
    assert not paddle.graph.initializer and len(set(graph.constants.values())) == 9   # 8 weights and the 0.5 literal
    assert len(graph.nodes) + len(graph.constants) == len(paddle.graph.node)   # every node of the file: one or the other
    assert summarize(graph).param_count == summarize(plain).param_count > 5000
    assert "9 of them in Constant nodes" in format_summary(summarize(graph))
    assert to_json(graph)["constant_weights"]["Constant_w6"] == "fc.weight"
    assert graph.total_param_bytes == plain.total_param_bytes
    assert list(graph.nodes) == list(plain.nodes)
    assert {n: op.param_bytes for n, op in graph.nodes.items()} == {n: op.param_bytes for n, op in plain.nodes.items()}


@pytest.mark.parametrize("name", sorted(PLACERS))
def test_every_placer_places_constant_weights_like_initializers(pair, name):
    (_, plain), (_, graph) = pair
    cost = AnalyticCostModel(DEVICES)
    spec = PLACERS[name]
    # caps that one device cannot meet alone, so the memory rules decide
    caps = None
    if spec.respects_memory:
        single = PLACERS["single"].place(plain, DEVICES, cost, None)
        caps = {d: int(executor_peak_memory(plain, single)["cpu:0"] * 0.9) for d in DEVICES}
    try:
        a = spec.place(plain, DEVICES, cost, caps, seed=0)
    except PlacerError as refused:   # a placer these caps are too tight for refuses both alike
        with pytest.raises(PlacerError, match=re.escape(str(refused))):
            spec.place(graph, DEVICES, cost, caps, seed=0)
        return
    b = spec.place(graph, DEVICES, cost, caps, seed=0)
    assert {n: b.nodes[n] for n in graph.nodes} == {n: a.nodes[n] for n in plain.nodes}
    # the placement names every node of the file: each Constant on its reader's device
    for constant, tensor in graph.constants.items():
        assert b.nodes[constant] == b.nodes[graph.consumers[tensor][0]]
    assert set(b.nodes) == set(graph.nodes) | set(graph.constants)
    simulated = [SimulatedMeasurer(g, DEVICES, cost).measure(p) for g, p in ((plain, a), (graph, b))]
    assert simulated[0].ok and simulated[0].step_time == simulated[1].step_time
    assert [r.param_bytes for r in device_summary(graph, b)] == [r.param_bytes for r in device_summary(plain, a)]


def test_groups_leave_constants_out_and_their_placements_name_them(pair):
    (_, plain), (_, graph) = pair
    grouping = group_graph(graph, 4, 2)
    assert grouping.groups == group_graph(plain, 4, 2).groups
    placement = grouping.expand([0, 1, 0, 1], DEVICES)
    assert set(placement.nodes) == set(graph.nodes) | set(graph.constants)


def test_constant_weights_run_apply_and_split_like_onnxruntime(pair, tmp_path):
    _, (paddle, graph) = pair
    x = _x()
    expected = ort.InferenceSession(paddle.SerializeToString()).run(None, {"x": x})[0]
    rng = random.Random(0)
    for _ in range(3):
        nodes = {n: rng.choice(DEVICES) for n in graph.nodes}
        # a hand-written placement may name the Constants too (any device: they follow their readers)
        nodes.update({c: DEVICES[0] for c in graph.constants})
        placement = resolve_placement(graph, Placement(DEVICES, nodes, graph.sha256), check_devices=False)
        with PlacedExecutor(graph, placement, DEVICES) as executor:
            np.testing.assert_allclose(executor.run({"x": x})["y"].numpy(), expected, rtol=1e-5, atol=1e-5)
    placed = apply_placement(paddle, placement, graph)
    devices = {n.name: {e.key: e.value for e in n.metadata_props}["placer.device"] for n in placed.graph.node}
    assert devices == placement.nodes
    split = write_split(paddle, placement, graph, tmp_path / "parts")
    np.testing.assert_allclose(run_split(split, {"x": x})["y"], expected, rtol=1e-5, atol=1e-5)
