"""Floating-point `Constant` nodes as weights.

Some exporters (paddle2onnx among them) keep every weight in a `Constant` node and write no
initializers. Such a node is a parameter, not an op: loading turns it into an initializer, so that
every pass (parameters, memory, caps, the placers' weight rules, the executor's one copy per
reading device) treats it as the same model with initializers; the node itself follows its first
reader wherever a placement names nodes (`constant_devices`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import numpy as np
import onnx
from onnx import numpy_helper

T = TypeVar("T")
_FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                          onnx.TensorProto.BFLOAT16})


def _float_value(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The node's value as a tensor named after its output, when it is a floating-point Constant."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attribute) != 1:
        return None
    attr = node.attribute[0]
    if attr.name == "value" and attr.t.data_type in _FLOAT_TYPES and not attr.t.external_data:
        tensor = onnx.TensorProto()
        tensor.CopyFrom(attr.t)
    elif attr.name in ("value_float", "value_floats"):
        tensor = numpy_helper.from_array(np.asarray(onnx.helper.get_attribute_value(attr), dtype=np.float32))
    else:
        return None
    tensor.name = node.output[0]
    return tensor


def constants_to_initializers(model: onnx.ModelProto) -> dict[str, str]:
    """Turn the top-level floating-point Constant nodes of `model` into initializers, in place.

    Returns node name -> tensor name of each node turned. Constants inside subgraphs stay: they
    run with their control-flow node."""
    turned: dict[str, str] = {}
    kept = []
    for node in model.graph.node:
        tensor = _float_value(node)
        if tensor is None:
            kept.append(node)
            continue
        model.graph.initializer.append(tensor)
        turned[node.name] = tensor.name
    if turned:
        del model.graph.node[:]
        model.graph.node.extend(kept)
    return turned


def constant_devices(constants: Mapping[str, str], consumers: Mapping[str, list[str]],
                     nodes: Mapping[str, T]) -> dict[str, T]:
    """The device of each Constant node (node -> tensor in `constants`) under a node -> device map
    (or any node -> value map): its first reader's (in topological order), or the first node's
    for a Constant read by none."""
    if not constants or not nodes:
        return {}
    fallback = next(iter(nodes.values()))
    return {name: nodes.get(next(iter(consumers.get(tensor, ())), ""), fallback)
            for name, tensor in constants.items()}
