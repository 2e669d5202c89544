"""Builders for the placer tests: a real (valid) ONNX model as an `OpGraph`, and a cost model."""

from __future__ import annotations

import hashlib
import math

import networkx as nx
import numpy as np
import onnx
from onnx import TensorProto, helper

from placer.costmodel.protocol import own_link
from placer.graph.opgraph import OpGraph, OpNode, TensorInfo

DOMAIN = "placer.test"


class LinearCost:
    """op time = flops / speed[device]; transfer = latency + bytes / bandwidth across devices."""

    def __init__(self, speed: dict[str, float], latency: float = 1e-4, bandwidth: float = 1e9,
                 unsupported: dict[str, set[str]] | None = None) -> None:
        self.devices = list(speed)
        self.speed, self.latency, self.bandwidth = speed, latency, bandwidth
        self.unsupported = unsupported or {}

    def op_time(self, node: OpNode, device: str) -> float:
        if device in self.unsupported.get(node.name, set()):
            return math.inf
        return node.flops / self.speed[device]

    def transfer_time(self, nbytes: int, src: str, dst: str) -> float:
        return 0.0 if src == dst else self.latency + nbytes / self.bandwidth

    def route(self, src, dst):
        return own_link(src, dst)


def make_graph(spec: list[tuple[str, list[str], float]], numel: int = 1000,
               params: dict[str, int] | None = None) -> OpGraph:
    """`spec`: (node name, producer names, flops) in topological order. Every node outputs one
    float32 tensor of `numel` elements; nodes without producers read the graph input `x`; a node
    in `params` also reads its own weight initializer of that many bytes. The nodes are an opaque
    op of a test domain: these graphs exercise placement logic and are never run."""
    params = params or {}
    info = lambda name, n=numel: TensorInfo(name, (n,), "float32")  # noqa: E731
    consumed = {p for _, producers, _ in spec for p in producers}
    protos, nodes, weights = [], {}, {}
    for name, producers, flops in spec:
        inputs = [f"{p}_out" for p in producers] or ["x"]
        if name in params:
            weights[f"{name}_w"] = info(f"{name}_w", params[name] // 4)
            inputs.append(f"{name}_w")
        proto = helper.make_node("Op", inputs, [f"{name}_out"], name=name, domain=DOMAIN)
        protos.append(proto)
        nodes[name] = OpNode(name=name, op_type="Op", domain=DOMAIN, opset=1, inputs=tuple(inputs),
                             outputs=(f"{name}_out",), proto=proto, output_info=(info(f"{name}_out"),),
                             param_bytes=params.get(name, 0), flops=flops)
    outputs = [f"{name}_out" for name, _, _ in spec if name not in consumed]
    model = helper.make_model(helper.make_graph(
        protos, "test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [numel])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [numel]) for o in outputs],
        initializer=[helper.make_tensor(w.name, TensorProto.FLOAT, w.shape, [0.0] * w.numel)
                     for w in weights.values()]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])
    onnx.checker.check_model(model)
    dag = nx.DiGraph()
    for name, node in nodes.items():
        dag.add_node(name, op=node)
    for name, producers, _ in spec:
        for p in producers:
            dag.add_edge(p, name, tensors=[f"{p}_out"], bytes=info(p).nbytes)
    tensors = {"x": info("x"), **weights, **{t.name: t for n in nodes.values() for t in n.output_info}}
    return OpGraph(model=model, nodes=nodes, tensors=tensors, inputs=[info("x")],
                   outputs=[tensors[o] for o in outputs], initializers=weights, opsets={"": 17, DOMAIN: 1},
                   sha256=hashlib.sha256(model.SerializeToString()).hexdigest(), dag=dag, source="test")


def random_dag(n: int, seed: int) -> OpGraph:
    """`n` nodes, each reading up to two random earlier ones, 10-1000 MFLOPs, a 4 kB weight each."""
    rng = np.random.default_rng(seed)
    spec = [(f"n{i}", sorted({f"n{j}" for j in rng.integers(0, i, size=min(i, 2))}) if i else [],
             float(rng.uniform(1e7, 1e9))) for i in range(n)]
    return make_graph(spec, numel=10_000, params={f"n{i}": 4000 for i in range(n)})


def ladder_graph(rungs: int, batch: int) -> OpGraph:
    """x -> mm0 -> ... -> mm{rungs-1}, each MatMul with its own 64 x 64 weight, and a Relu side
    branch per rung; the input `batch` x 64."""
    from onnx import numpy_helper

    from placer.graph.load import load_graph

    rng = np.random.default_rng(0)
    nodes, inits, x, outputs = [], [], "x", []
    for i in range(rungs):
        inits.append(numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"y{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Relu", [f"y{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"y{i}"
        outputs.append(f"r{i}")
    graph = helper.make_graph(nodes, "ladder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 64])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [batch, 64]) for o in outputs], inits)
    return load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
