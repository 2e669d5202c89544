"""The kernel registry: (domain, op type, opset) -> a builder that binds one ONNX node to torch.

A builder is called once per node, at bind time, with the node's parsed attributes; it returns
the function the executor then calls on every step. Builders register with the first opset at
which their signature applies (`since`); `bind_node` picks the newest one not above the model's
opset, which is how attributes that became inputs (Slice at 10, Squeeze at 13, Pad at 11, ...)
are handled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import onnx
import torch

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.graph.structure import STANDARD_DOMAINS, canonical_domain, nested_nodes, node_inputs

log = logging.getLogger(__name__)

Tensors = list[torch.Tensor | None]


class NodeFn(Protocol):
    """A bound node: inputs in ONNX order (None for an omitted optional input) -> its outputs."""

    def __call__(self, inputs: Tensors) -> list[torch.Tensor]: ...


@dataclass(frozen=True)
class Node:
    """What a builder sees of an ONNX node: attributes already decoded into Python values."""

    op_type: str
    domain: str
    opset: int
    attrs: dict[str, Any]
    n_inputs: int                 # inputs listed in the node, omitted optional ones included
    n_outputs: int                # outputs listed in the node ('' entries included)
    name: str = ""
    outputs_used: tuple[bool, ...] = ()   # False for an output named '' (not wanted)
    inputs: tuple[str, ...] = ()          # the names the kernel is fed: `structure.node_inputs`

    def attr(self, key: str, default: Any = None) -> Any:
        """The attribute `key`, or `default` when the node does not set it."""
        return self.attrs.get(key, default)


Builder = Callable[[Node], Callable[[Tensors], list[torch.Tensor]]]


@dataclass(frozen=True)
class _Entry:
    since: int
    builder: Builder
    host_inputs: frozenset[int]


_REGISTRY: dict[tuple[str, str], list[_Entry]] = {}


def register(*op_types: str, since: int = 1, domain: str = "",
             host_inputs: Iterable[int] = ()) -> Callable[[Builder], Builder]:
    """Register a builder for `op_types` from opset `since` on.

    `host_inputs` are the positions of shape-like integer inputs (Reshape's shape, Slice's
    starts, ...) that the kernel reads on the host with `.tolist()`.
    """
    def deco(builder: Builder) -> Builder:
        for op in op_types:
            entries = _REGISTRY.setdefault((domain, op), [])
            entries.append(_Entry(since, builder, frozenset(host_inputs)))
            entries.sort(key=lambda e: e.since)
        return builder
    return deco


@dataclass
class BoundKernel:
    """A node bound to its kernel: call it with the node's inputs to get its outputs.

    Kernels run on the device of their tensor inputs and never synchronise with the host for
    ordinary tensors. The inputs listed in `host_inputs` are small int64 tensors (shapes, axes,
    starts, k, pads) that are read with `.tolist()`; the executor keeps such tensors on the CPU,
    and so do kernels that make them (`Shape`, `Size`, `Constant`, `ConstantOfShape`,
    `Range`), so reading them costs no device sync. Should data inputs arrive on different
    devices (a CPU constant meeting a CUDA activation), they are moved to the accelerator.
    """

    op_type: str
    name: str
    fn: Callable[[Tensors], list[torch.Tensor]]
    host_inputs: frozenset[int] = field(default_factory=frozenset)

    def __call__(self, inputs: Tensors) -> list[torch.Tensor]:
        if len(inputs) > 1:
            # Cheap check (is_cuda is a C attribute): only a CPU/accelerator mix needs work.
            host = self.host_inputs
            first = None
            for i, t in enumerate(inputs):
                if t is None or i in host:
                    continue
                if first is None:
                    first = t.is_cuda
                elif t.is_cuda != first:
                    inputs = _align(inputs, host)
                    break
        return self.fn(inputs)


def _align(inputs: Tensors, host: frozenset[int]) -> Tensors:
    target = next(t.device for i, t in enumerate(inputs)
                  if t is not None and i not in host and t.is_cuda)
    return [t if t is None or i in host else t.to(target, non_blocking=True)
            for i, t in enumerate(inputs)]


def decode_attrs(node: onnx.NodeProto) -> dict[str, Any]:
    """Attribute name -> Python value (strings decoded, tensors as numpy arrays)."""
    from onnx import numpy_helper

    attrs: dict[str, Any] = {}
    for a in node.attribute:
        if a.ref_attr_name:
            raise PlacerError(f"node {node.name or node.op_type!r} refers to a function attribute "
                              f"{a.ref_attr_name!r}; inline the model's functions first")
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode() for v in value]
        elif isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        attrs[a.name] = value
    return attrs


def _lookup(domain: str, op_type: str, opset: int) -> _Entry | None:
    entries = _REGISTRY.get((domain, op_type))
    if not entries:
        return None
    chosen = None
    for e in entries:
        if e.since <= opset:
            chosen = e
    return chosen


def bind_node(node: onnx.NodeProto, opset: int) -> BoundKernel:
    """Bind one ONNX node (of a model whose opset for the node's domain is `opset`) to torch."""
    domain = canonical_domain(node.domain)
    entry = _lookup(domain, node.op_type, opset)
    if entry is None:
        raise PlacerError(f"unsupported operator {_op_label(domain, node.op_type)} (opset {opset}) "
                          f"in node {node.name!r}; re-export the model without it")
    info = Node(op_type=node.op_type, domain=domain, opset=opset, attrs=decode_attrs(node),
                n_inputs=len(node.input), n_outputs=len(node.output), name=node.name,
                outputs_used=tuple(bool(o) for o in node.output), inputs=node_inputs(node))
    try:
        fn = entry.builder(info)
    except PlacerError:
        raise
    except (ValueError, NotImplementedError, KeyError, TypeError) as e:
        raise PlacerError(f"cannot run node {node.name or node.op_type!r} ({node.op_type}): {e}; "
                          "re-export the model with other settings for this operator") from e
    return BoundKernel(node.op_type, node.name, fn, entry.host_inputs)


def host_inputs(op_type: str, opset: int, domain: str = "") -> frozenset[int]:
    """Positions of the inputs of `op_type` that are read on the host (shapes, axes, ...)."""
    entry = _lookup(domain, op_type, opset)
    return entry.host_inputs if entry else frozenset()


def host_read_inputs(graph: OpGraph) -> Callable[[str], frozenset[int]]:
    """node name -> the input positions its kernel reads on the host (folded nodes included): where
    no gradient flows (`placer.program.training.gradient_tensors`)."""
    table = {name: host_inputs(n.op_type, n.opset, canonical_domain(n.domain)) for name, n in graph.nodes.items()}
    return lambda node: table.get(node, frozenset())


def is_supported(op_type: str, opset: int, domain: str = "") -> bool:
    """Whether a kernel exists for this op at this opset."""
    return _lookup(canonical_domain(domain), op_type, opset) is not None


def supported_ops(domain: str = "") -> list[str]:
    """Op types with a kernel in `domain`, sorted."""
    return sorted(op for (d, op) in _REGISTRY if d == domain)


def _op_label(domain: str, op_type: str) -> str:
    return op_type if domain in STANDARD_DOMAINS else f"{domain}::{op_type}"


def opset_versions(model: onnx.ModelProto) -> dict[str, int]:
    """Domain (canonical) -> the opset version `model` imports (the standard domain: 1 if not imported)."""
    opsets = {canonical_domain(o.domain): o.version for o in model.opset_import}
    opsets.setdefault("", 1)
    return opsets


def unsupported_ops(model_or_nodes: onnx.ModelProto | Sequence[onnx.NodeProto],
                    opset: int | None = None) -> list[str]:
    """Sorted op labels (``Op`` or ``domain::Op``) of the nodes that have no kernel.

    With a list of nodes, `opset` is the default-domain opset (default: the newest known).
    """
    if isinstance(model_or_nodes, onnx.ModelProto):
        model = model_or_nodes
        if model.functions:
            # Calls of the model's local functions stand for their bodies, which are what runs.
            from onnx import inliner

            model = inliner.inline_local_functions(model)
        nodes: Iterable[onnx.NodeProto] = model.graph.node
        opsets = opset_versions(model)
    else:
        nodes = model_or_nodes
        opsets = {"": opset or onnx.defs.onnx_opset_version()}
    missing = set()
    for n in _with_nested(nodes):
        domain = canonical_domain(n.domain)
        if not is_supported(n.op_type, opsets.get(domain, 1), domain):
            missing.add(_op_label(domain, n.op_type))
    return sorted(missing)


def _with_nested(nodes: Iterable[onnx.NodeProto]) -> Iterable[onnx.NodeProto]:
    """`nodes` and every node of their subgraphs, at any depth: what control flow runs."""
    for n in nodes:
        yield n
        yield from nested_nodes(n)


def check_supported(model: onnx.ModelProto) -> None:
    """Raise one `PlacerError` naming every op of `model` that has no kernel, or whose
    attributes its kernel cannot run (e.g. training-mode BatchNormalization before opset 14)."""
    missing = unsupported_ops(model)
    if not missing:
        missing = _unbindable(model)
    if missing:
        raise PlacerError(f"the model uses {len(missing)} unsupported operator(s): "
                          f"{', '.join(missing)}; re-export it without them (or with another opset)")


def _unbindable(model: onnx.ModelProto) -> list[str]:
    """`Op (reason)` for each distinct bind-time refusal among the model's nodes."""
    opsets = opset_versions(model)
    refused: dict[str, None] = {}
    for n in model.graph.node:
        domain = canonical_domain(n.domain)
        if n.op_type == "Constant":
            continue    # binding copies its value; a Constant always binds
        try:
            bind_node(n, opsets.get(domain, 1))
        except PlacerError as e:
            reason = str(e).split(": ", 1)[-1].split("; ")[0]
            refused[f"{_op_label(domain, n.op_type)} ({reason})"] = None
    return list(refused)
