"""Builders for the placer tests: a real (valid) ONNX model as an `OpGraph`, and a cost model."""

from __future__ import annotations

import hashlib
import math

import networkx as nx
import onnx
from onnx import TensorProto, helper

from placer.graph.opgraph import OpGraph, OpNode, TensorInfo


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


def make_graph(spec: list[tuple[str, list[str], float]], numel: int = 1000,
               params: dict[str, int] | None = None) -> OpGraph:
    """`spec`: (node name, producer names, flops) in topological order. Every node outputs one
    float32 tensor of `numel` elements; nodes without producers read the graph input `x`.
    A node's weight bytes come from `params` (default 0)."""
    params = params or {}
    shape = (numel,)
    info = lambda name: TensorInfo(name, shape, "float32")  # noqa: E731
    consumed = {p for _, producers, _ in spec for p in producers}
    protos, nodes = [], {}
    for name, producers, flops in spec:
        inputs = [f"{p}_out" for p in producers] or ["x"]
        proto = helper.make_node("Sum" if len(inputs) > 1 else "Identity", inputs, [f"{name}_out"], name=name)
        protos.append(proto)
        nodes[name] = OpNode(name=name, op_type=proto.op_type, domain="", opset=17, inputs=tuple(inputs),
                             outputs=(f"{name}_out",), proto=proto, output_info=(info(f"{name}_out"),),
                             param_bytes=params.get(name, 0), flops=flops)
    outputs = [f"{name}_out" for name, _, _ in spec if name not in consumed]
    model = helper.make_model(helper.make_graph(
        protos, "test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(shape)) for o in outputs]),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    dag = nx.DiGraph()
    for name, node in nodes.items():
        dag.add_node(name, op=node)
    for name, producers, _ in spec:
        for p in producers:
            dag.add_edge(p, name, tensors=[f"{p}_out"], bytes=info(p).nbytes)
    tensors = {"x": info("x"), **{t.name: t for n in nodes.values() for t in n.output_info}}
    return OpGraph(model=model, nodes=nodes, tensors=tensors, inputs=[info("x")],
                   outputs=[tensors[o] for o in outputs], initializers={}, opsets={"": 17},
                   sha256=hashlib.sha256(model.SerializeToString()).hexdigest(), dag=dag, source="test")
