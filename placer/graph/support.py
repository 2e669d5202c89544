"""Which device kinds can run each node: asked of the kernels package (`is_supported`, else
`unsupported_ops`) when it is importable; otherwise every standard-domain op is assumed to run
on both the CPU and CUDA."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence

import onnx

from placer.graph.structure import STANDARD_DOMAINS

log = logging.getLogger(__name__)

# The torch kernels run wherever torch runs; a kind is lost only where no kernel exists.
ALL_KINDS = frozenset({"cpu", "cuda"})


def device_kinds(nodes: Sequence[onnx.NodeProto], opsets: Mapping[str, int]) -> list[frozenset[str]]:
    """The device kinds that can run each of `nodes` (empty: no kernel for it anywhere)."""
    supported = _kernel_oracle(nodes, opsets)
    result = []
    for node in nodes:
        ok = node.domain in STANDARD_DOMAINS and supported(node)
        result.append(ALL_KINDS if ok else frozenset())
    return result


def _kernel_oracle(nodes: Sequence[onnx.NodeProto], opsets: Mapping[str, int]):
    # Imported lazily: the kernels live in placer.measure (torch), which loading must not need.
    try:
        kernels = importlib.import_module("placer.measure.kernels")
    except ImportError:
        return lambda node: True
    is_supported = getattr(kernels, "is_supported", None)
    if is_supported is not None:
        def ask(node: onnx.NodeProto) -> bool:
            domain = "" if node.domain == "ai.onnx" else node.domain
            return bool(is_supported(node.op_type, opsets.get(domain, opsets.get("", 1)), domain))
        return ask
    unsupported_ops = getattr(kernels, "unsupported_ops", None)
    if unsupported_ops is None:
        return lambda node: True
    # Labels are "Op" or "domain::Op" (see the kernels registry).
    missing = set(unsupported_ops(list(nodes), opsets.get("", 1)))
    return lambda node: (node.op_type if node.domain in STANDARD_DOMAINS
                         else f"{node.domain}::{node.op_type}") not in missing
