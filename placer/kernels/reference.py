"""A plain sequential interpreter of an ONNX graph over the torch kernels.

Used to complete shapes that static inference leaves unknown, as the engine of the conformance
backend, and as the single-device reference the placed executor is checked against. It is the
shared walk (`placer.program.walk`) over the model's nodes with a bound kernel as each step.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from placer.errors import PlacerError
from placer.graph.structure import canonical_domain, node_inputs
from placer.kernels import bind_node, check_supported
from placer.kernels.dtypes import to_numpy, to_torch
from placer.kernels.registry import opset_versions
from placer.program.walk import Step, last_uses, walk

log = logging.getLogger(__name__)


def _prepare(model: onnx.ModelProto) -> onnx.ModelProto:
    if model.functions:
        # Local functions (e.g. from the dynamo exporter) become plain nodes.
        from onnx import inliner

        model = inliner.inline_local_functions(model)
    return model


def iter_values(model: onnx.ModelProto, feeds: dict[str, np.ndarray | torch.Tensor],
                keep: Sequence[str] | None = None,
                device: str | torch.device = "cpu") -> Iterator[tuple[str, torch.Tensor]]:
    """Run the graph node by node, yielding (name, tensor) for every node output as it is made.

    Tensors no later node reads (and not in `keep`) are dropped as soon as possible, so this
    also serves to find every intermediate shape of a large model.
    """
    model = _prepare(model)
    check_supported(model)
    graph = model.graph
    opsets = opset_versions(model)
    device = torch.device(device)
    initializer_names = {t.name for t in graph.initializer}
    missing = [i.name for i in graph.input if i.name not in feeds and i.name not in initializer_names]
    if missing:
        raise PlacerError(f"no value given for the model input(s) {', '.join(missing)}; "
                          "feed every graph input")

    values: dict[str, torch.Tensor] = {}
    for t in graph.initializer:
        values[t.name] = to_torch(numpy_helper.to_array(t)).to(device)
    for name, value in feeds.items():
        t = value if isinstance(value, torch.Tensor) else to_torch(value)
        values[name] = t.to(device)

    nodes = list(graph.node)
    steps = [Step(n.name or f"#{i}", n.op_type, node_inputs(n), tuple(n.output)) for i, n in enumerate(nodes)]
    _check_order(nodes, set(values))
    kernels = [bind_node(n, opsets.get(canonical_domain(n.domain), 1)) for n in nodes]

    def run_node(i: int, inputs: list[torch.Tensor | None]) -> list[torch.Tensor]:
        # Trailing omitted inputs are dropped so kernels can test len(inputs).
        while inputs and inputs[-1] is None:
            inputs.pop()
        try:
            return kernels[i](inputs)
        except (RuntimeError, ValueError, IndexError, TypeError, NotImplementedError) as e:
            # A kernel failing on this model's data: name the node so the user can find it.
            node = nodes[i]
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            shapes = ", ".join("-" if t is None else "x".join(map(str, t.shape)) or "scalar"
                               for t in inputs)
            raise PlacerError(f"node {node.name or node.op_type!r} ({node.op_type}) failed on inputs "
                              f"of shape [{shapes}]: {reason}; check the model and its input shapes"
                              ) from e

    # What the caller keeps and the graph returns is never dropped.
    frees = last_uses(steps, keep=set(keep or ()) | {o.name for o in graph.output})
    for i in walk(steps, frees, values, run_node):
        for name in steps[i].outputs:
            if name in values:
                yield name, values[name]


def _check_order(nodes: Sequence[onnx.NodeProto], available: set[str]) -> None:
    """Refuse a node that reads a tensor no earlier node produces, before anything runs."""
    for node in nodes:
        for name in node_inputs(node):
            if name and name not in available:
                raise PlacerError(f"node {node.name or node.op_type!r} reads {name!r}, which no earlier "
                                  "node produces; the model is not in topological order")
        available.update(node.output)


def run_model(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
              outputs: list[str] | None = None, device: str = "cpu") -> dict[str, np.ndarray]:
    """Run `model` on `feeds` with the torch kernels; returns the named outputs as numpy arrays.

    `outputs` may name any tensor of the graph (intermediates included); default: the graph
    outputs. Works on models whose intermediate shapes are unknown.
    """
    wanted = list(outputs) if outputs is not None else [o.name for o in model.graph.output]
    found: dict[str, np.ndarray] = {}
    direct = {**{t.name: t for t in model.graph.initializer}}
    for name in wanted:
        if name in feeds:
            found[name] = np.array(feeds[name], copy=True)
        elif name in direct:
            found[name] = np.array(numpy_helper.to_array(direct[name]), copy=True)
    with torch.inference_mode():
        for name, value in iter_values(model, feeds, keep=wanted, device=device):
            if name in wanted:
                found[name] = to_numpy(value)
    unknown = [n for n in wanted if n not in found]
    if unknown:
        raise PlacerError(f"the model has no tensor named {', '.join(unknown)}; "
                          "ask for graph outputs or node outputs")
    return {name: found[name] for name in wanted}


def tensor_shapes(model: onnx.ModelProto, feeds: dict[str, np.ndarray]
                  ) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every node output's (shape, numpy dtype name) from one run on `feeds` (shape completion)."""
    shapes: dict[str, tuple[tuple[int, ...], str]] = {}
    with torch.inference_mode():
        for name, value in iter_values(model, feeds):
            shapes[name] = (tuple(value.shape), str(value.dtype).removeprefix("torch."))
    return shapes
