"""Static facts about control-flow nodes (If, Loop, Scan): the FLOPs of their subgraphs, and
whether their cost depends on the data (the branch taken, a trip count set by a condition)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx

from placer.graph.opgraph import TensorInfo
from placer.graph.structure import subgraphs

Flops = Callable[[onnx.NodeProto, Mapping[str, TensorInfo]], float]
CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})


def _declared(graph: onnx.GraphProto) -> dict[str, TensorInfo]:
    """The subgraph's tensors whose type it declares with a static shape."""
    from placer.graph.shapes import dtype_name

    infos = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tt = value.type.tensor_type
        if value.type.HasField("tensor_type") and tt.elem_type and tt.HasField("shape") \
                and all(d.HasField("dim_value") for d in tt.shape.dim):
            infos[value.name] = TensorInfo(value.name, tuple(d.dim_value for d in tt.shape.dim),
                                           dtype_name(tt.elem_type))
    for t in graph.initializer:
        infos[t.name] = TensorInfo(t.name, tuple(t.dims), dtype_name(t.data_type))
    return infos


def _graph_flops(graph: onnx.GraphProto, outer: Mapping[str, TensorInfo], flops: Flops,
                 constants: Mapping[str, np.ndarray]) -> float:
    tensors = {**outer, **_declared(graph)}
    return sum(node_cost(n, tensors, flops, constants) for n in graph.node)


def trip_count(node: onnx.NodeProto, constants: Mapping[str, np.ndarray]) -> int | None:
    """A Loop's static trip count (its M input a constant), else None."""
    value = constants.get(node.input[0]) if node.input and node.input[0] else None
    trips = int(np.asarray(value).reshape(-1)[0]) if value is not None else None
    # torch writes INT64_MAX for a loop only its condition ends: no count
    return trips if trips is not None and trips < 2**31 else None


def node_cost(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo], flops: Flops,
              constants: Mapping[str, np.ndarray]) -> float:
    """FLOPs of `node`; of a control-flow node, its subgraphs' (shapes they declare or the
    enclosing graph knows): the larger branch of an If, a Loop's body times its static trip
    count (once when it has none), a Scan's body times its sequence length."""
    if node.op_type not in CONTROL_FLOW:
        return flops(node, tensors)
    bodies = [_graph_flops(g, tensors, flops, constants) for g in subgraphs(node)]
    if node.op_type == "If":
        return max(bodies, default=0.0)
    if node.op_type == "Loop":
        return bodies[0] * max(trip_count(node, constants) or 1, 0)
    scans = int(next((a.i for a in node.attribute if a.name == "num_scan_inputs"), 0))
    first = tensors.get(node.input[len(node.input) - scans]) if scans else None
    axes = next((list(a.ints) for a in node.attribute if a.name == "scan_input_axes"), [0])
    steps = first.shape[axes[0]] if first is not None and first.shape else 1
    return bodies[0] * steps


def data_dependence(node: onnx.NodeProto, constants: Mapping[str, np.ndarray]) -> str:
    """What of the node's cost the data decides ('' when nothing does)."""
    if node.op_type == "If" and node.input[0] not in constants:
        return "the branch taken"
    if node.op_type == "Loop":
        if trip_count(node, constants) is None:
            return "its trip count"
        body = node.attribute[0].g if node.attribute else None
        cond_in = body.input[1].name if body is not None and len(body.input) > 1 else ""
        cond_out = body.output[0].name if body is not None and body.output else ""
        passes_through = any(n.op_type == "Identity" and list(n.input) == [cond_in] and list(n.output) == [cond_out]
                             for n in body.node) if body is not None else False
        if cond_out != cond_in and not passes_through:
            return "a condition that may end it early"
    return ""


def small_constants(graph: onnx.GraphProto, limit: int = 16) -> dict[str, np.ndarray]:
    """The values of the graph's small initializers and Constant nodes (trip counts, conditions)."""
    from onnx import numpy_helper

    values = {t.name: t for t in graph.initializer}
    values.update((n.output[0], n.attribute[0].t) for n in graph.node
                  if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value")
    return {name: numpy_helper.to_array(t) for name, t in values.items()
            if int(np.prod(t.dims, dtype=np.int64)) <= limit and not t.external_data}
