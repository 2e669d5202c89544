"""Floating-point `Constant` nodes, and what is computed from Constants only, as weights.

Some exporters (paddle2onnx among them) keep every weight in a `Constant` node and write no
initializers, sometimes behind a cast or a reshape (Constant -> Cast(float16 -> float32) -> Conv).
Such a node is a parameter, not an op: loading turns it into an initializer (a constant-only
subgraph that makes a float tensor is evaluated into one), so that every pass (parameters,
memory, caps, the placers' weight rules, the executor's one copy per reading device) treats it as
the same model with initializers; each node folded follows the first reader of its weight
wherever a placement names nodes (`placer.graph.opgraph.constant_devices`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from placer.graph.fold import evaluate_node
from placer.graph.structure import STANDARD_DOMAINS, deterministic, node_inputs, subgraphs

log = logging.getLogger(__name__)
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


def _constant_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Tensor -> value of every top-level node computed from Constant nodes only (deterministic,
    standard ops, no subgraphs; a node the reference evaluator cannot run is left out)."""
    opsets = {o.domain: o.version for o in model.opset_import}
    values: dict[str, np.ndarray] = {}
    for node in model.graph.node:
        reads = [t for t in node_inputs(node) if t]
        if node.domain not in STANDARD_DOMAINS or subgraphs(node) or not deterministic(node) \
                or (node.op_type != "Constant" and not reads) or any(t not in values for t in reads):
            continue
        try:
            outputs = evaluate_node(node, [values[t] if t else None for t in node.input], opsets)
        except Exception as exc:  # noqa: BLE001 - it stays a node and runs (or folds) as before
            log.debug("not folding %s (%s) into a weight: %s", node.name, node.op_type, exc)
            continue
        values.update((t, np.asarray(v)) for t, v in zip(node.output, outputs) if t)
    return values


def constants_to_initializers(model: onnx.ModelProto) -> dict[str, str]:
    """Turn the top-level floating-point Constant nodes of `model`, and the constant-only subgraphs
    that make a float tensor other nodes read, into initializers, in place.

    Returns node name -> the weight (tensor) whose first reader it follows, for each node turned.
    A constant-only node that something else needs as a node (a shape it makes, a graph output)
    stays, as do Constants inside subgraphs: they run with their control-flow node."""
    nodes = list(model.graph.node)
    values = _constant_values(model)
    made = {t: k for k, n in enumerate(nodes) if n.output and n.output[0] in values for t in n.output if t}
    constant = set(made.values())
    readers: dict[str, list[int]] = {}
    for k, n in enumerate(nodes):
        for t in dict.fromkeys(node_inputs(n)):
            readers.setdefault(t, []).append(k)
    outputs = {o.name for o in model.graph.output}
    # a float tensor of constant nodes that another node reads is a weight; the constant nodes
    # leading to none stay nodes, and so does every constant node one of them reads
    weights = [t for t, k in made.items() if t not in outputs and values[t].dtype.kind == "f"
               and any(r not in constant for r in readers.get(t, []))]
    leading = _ancestors({made[t] for t in weights}, nodes, made)
    kept = _ancestors(constant - leading, nodes, made)
    # a float Constant a kept node reads (or none) is a weight of its own, as it was in the file
    own = {k: _float_value(nodes[k]) for k in kept}
    initializers = {t.name: t for t in own.values() if t is not None}
    initializers.update((t, numpy_helper.from_array(values[t], t)) for t in weights if made[t] not in kept)
    turned = {nodes[k].name: t.name for k, t in sorted(own.items()) if t is not None}
    for k in sorted(constant - kept):   # each folded node follows the first weight it leads to
        turned[nodes[k].name] = _first_weight(k, nodes, constant, readers, initializers)
    if turned:
        model.graph.initializer.extend(initializers.values())
        del model.graph.node[:]
        model.graph.node.extend(n for n in nodes if n.name not in turned)
    return turned


def _ancestors(start: set[int], nodes: list[onnx.NodeProto], made: Mapping[str, int]) -> set[int]:
    """`start` and every constant node (by index) they read from, at any depth."""
    found, stack = set(start), list(start)
    while stack:
        for t in node_inputs(nodes[stack.pop()]):
            if t in made and made[t] not in found:
                found.add(made[t])
                stack.append(made[t])
    return found


def _first_weight(k: int, nodes: list[onnx.NodeProto], constant: set[int], readers: Mapping[str, list[int]],
                  initializers: Mapping[str, onnx.TensorProto]) -> str:
    """The first weight (in node order) that node `k`'s outputs flow into through constant nodes."""
    seen, frontier, found = {k}, [k], []
    while frontier:
        j = frontier.pop()
        for t in nodes[j].output:
            if t in initializers:
                found.append((j, t))
                continue
            for r in readers.get(t, []):
                if r not in seen and r in constant:
                    seen.add(r)
                    frontier.append(r)
    return min(found)[1]
