"""What every placement of a graph shares, computed once: bound kernels, parameters as CPU
tensors, and the values of the nodes that depend only on initializers and shapes (folded).

Shapes are bound when the graph is loaded, so `Shape`/`Size` of any tensor with a known shape is
a constant; so is everything computed only from such values and initializers (the shape
subgraphs exporters emit around Reshape, Expand, Resize, ...). Folding them means the workers
never run them and kernels that read shapes never wait on a device.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np
import torch

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.graph.structure import STANDARD_DOMAINS, deterministic
from placer.kernels.registry import host_read_inputs
from placer.program.pipeline import Pipeline
from placer.program.placed_step import PlacedStep, place_step
from placer.program.training import TrainingSpec, trained_parameters

log = logging.getLogger(__name__)

_SHAPE_OPS = {"Shape", "Size"}


@dataclass
class PreparedGraph:
    """Kernels, parameters and folded constants of one graph (CPU tensors; shared, read-only)."""

    graph: OpGraph
    kernels: dict[str, object]                 # node name -> bound kernel (NodeFn), non-folded nodes
    params: dict[str, torch.Tensor]            # initializer name -> CPU tensor
    folded: dict[str, torch.Tensor] = field(default_factory=dict)  # tensor -> value of a folded node
    folded_nodes: list[str] = field(default_factory=list)
    weights: str = "load"                      # "shapes": unread weights are meta tensors (see `prepare`)

    def constant(self, name: str) -> torch.Tensor:
        """The CPU value of a parameter or folded tensor."""
        value = self.folded.get(name)
        return value if value is not None else self.params[name]

    def is_constant(self, name: str) -> bool:
        return name in self.folded or name in self.params

    def host_inputs(self, node_name: str) -> frozenset[int]:
        """Input positions the node's kernel reads on the host (shapes, axes, ...)."""
        return getattr(self.kernels.get(node_name), "host_inputs", frozenset())

    def place(self, assignment: dict[str, str], devices: list[str], training: TrainingSpec | None = None,
              pipeline: Pipeline | None = None) -> PlacedStep:
        """The step of the nodes left to run under `assignment` (node -> device), every constant at
        its bytes here (`placer.program.placed_step.place_step`)."""
        constants = {**self.params, **self.folded}
        constant_bytes = {name: value.numel() * value.element_size() for name, value in constants.items()}
        return place_step(self.graph, assignment, devices, self.kernels, constant_bytes, training,
                          host_inputs=host_read_inputs(self.graph), pipeline=pipeline)


def torch_dtype(numpy_name: str) -> torch.dtype:
    """Torch dtype of a numpy dtype name ('float32' -> torch.float32)."""
    return torch.from_numpy(np.empty(0, dtype=np.dtype(numpy_name))).dtype


def to_tensor(array: np.ndarray) -> torch.Tensor:
    """A CPU tensor sharing memory with `array` where numpy allows it."""
    array = np.asarray(array)
    if not array.flags.writeable or not array.flags.c_contiguous:
        array = np.array(array, order="C", copy=True)   # (ascontiguousarray would make 0-d arrays 1-d)
    return torch.from_numpy(array)


def prepare(graph: OpGraph, fold: bool = True, variables: Collection[str] = (), weights: str = "load") -> PreparedGraph:
    """Bind every node's kernel (refusing unsupported ops up front) and fold constant subgraphs;
    initializers in `variables` (a training step's parameters) are not constants there. With
    `weights` "shapes", a weight `load_graph(weights="shapes")` left in its file is a meta tensor of
    its shape, and so is what folds from it: bytes to account (`accounted_memory`), nothing to run."""
    from placer.kernels import bind_node, check_supported

    check_supported(graph.model)
    kernels = {name: bind_node(node.proto, node.opset) for name, node in graph.nodes.items()}
    prepared = PreparedGraph(graph=graph, kernels=kernels, params=_params(graph, weights), weights=weights)
    if fold:
        _fold(prepared, set(variables))
    return prepared


def _params(graph: OpGraph, weights: str) -> dict[str, torch.Tensor]:
    if weights == "load":
        return {name: to_tensor(graph.initializer_array(name)) for name in graph.initializers}
    from onnx import external_data_helper, numpy_helper

    protos = {t.name: t for t in graph.model.graph.initializer}
    return {name: _meta_tensor(graph, name) if external_data_helper.uses_external_data(protos[name])
            else to_tensor(numpy_helper.to_array(protos[name])) for name in graph.initializers}


def _meta_tensor(graph: OpGraph, tensor: str) -> torch.Tensor:
    info = graph.tensors[tensor]
    return torch.empty(info.shape, dtype=torch_dtype(info.dtype), device="meta")


def training_prepared(graph: OpGraph, prepared: PreparedGraph | None) -> PreparedGraph:
    """`prepared` when no folded node reads a parameter a training step may update (its value
    changes every step), else the graph prepared again with those left to run. Every float
    output's parameters: those of any loss (a loss covers float outputs only)."""
    trained = set(trained_parameters(graph, host_read_inputs(graph)))
    if prepared is not None and not any(t in trained for n in prepared.folded_nodes for t in graph.nodes[n].inputs):
        return prepared
    return prepare(graph, variables=trained, weights="load" if prepared is None else prepared.weights)


def _fold(prepared: PreparedGraph, variables: set[str]) -> None:
    graph = prepared.graph
    for name, node in graph.nodes.items():
        if node.domain not in STANDARD_DOMAINS or not deterministic(node.proto):
            continue
        if variables and any(t in variables for t in node.inputs):
            continue
        inputs = [t for t in node.inputs if t]
        # a meta output is kept only where it stands for a constant's value, with weights="shapes"
        keep_meta = False
        if node.op_type in _SHAPE_OPS and inputs and not prepared.is_constant(inputs[0]):
            args = _meta_input(graph, inputs[0])
            if args is None:
                continue
        elif all(prepared.is_constant(t) for t in inputs):
            args = [prepared.constant(t) if t else None for t in node.inputs]
            keep_meta = prepared.weights == "shapes"
        else:
            continue
        try:
            with torch.no_grad():
                outs = prepared.kernels[name](args)
        except Exception as exc:  # noqa: BLE001 - a node that cannot fold simply runs every step
            log.debug("not folding %s (%s): %s", name, node.op_type, exc)
            continue
        if not keep_meta and any(o.device.type == "meta" for o in outs):
            continue
        for t, value in zip(node.outputs, outs):
            if t:
                value = value.detach()
                prepared.folded[t] = value if value.device.type == "meta" else value.cpu().contiguous()
        prepared.folded_nodes.append(name)
        del prepared.kernels[name]
    if prepared.folded_nodes:
        log.info("folded %d constant/shape nodes of %s", len(prepared.folded_nodes), graph.source or "graph")


def _meta_input(graph: OpGraph, tensor: str) -> list[torch.Tensor | None] | None:
    """A meta tensor with the bound shape of `tensor`, so Shape/Size run without data."""
    info = graph.tensors.get(tensor)
    if info is None or any(d <= 0 for d in info.shape):
        return None
    try:
        dtype = torch_dtype(info.dtype)
    except TypeError:
        return None
    return [torch.empty(info.shape, dtype=dtype, device="meta")]


def check_feeds(graph: OpGraph, feeds: dict[str, object]) -> dict[str, torch.Tensor]:
    """Feeds as CPU-or-device tensors, checked against the graph's inputs (names, shapes)."""
    result: dict[str, torch.Tensor] = {}
    for info in graph.inputs:
        if info.name not in feeds:
            raise PlacerError(f"no value given for graph input {info.name!r}; "
                              f"the inputs are {[i.name for i in graph.inputs]}")
        value = feeds[info.name]
        tensor = value if isinstance(value, torch.Tensor) else to_tensor(np.asarray(value))
        if tuple(tensor.shape) != tuple(info.shape):
            raise PlacerError(f"input {info.name!r} has shape {tuple(tensor.shape)} but the graph was loaded "
                              f"for {tuple(info.shape)}; load it with --input-shape {info.name}="
                              f"{'x'.join(map(str, tensor.shape))} or give inputs of that shape")
        result[info.name] = tensor
    return result
