"""Which device kinds can run each node: asked of the kernels package when it says, otherwise
every standard-domain op is assumed to run on both the CPU and CUDA."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence

import onnx

from placer.graph.structure import STANDARD_DOMAINS

log = logging.getLogger(__name__)

ALL_KINDS = frozenset({"cpu", "cuda"})


def device_kinds(nodes: Sequence[onnx.NodeProto]) -> list[frozenset[str]]:
    """The device kinds that can run each of `nodes` (empty: no kernel for it anywhere)."""
    unsupported = _unsupported_op_types(nodes)
    result = []
    for node in nodes:
        standard = node.domain in STANDARD_DOMAINS
        result.append(ALL_KINDS if standard and node.op_type not in unsupported else frozenset())
    return result


def _unsupported_op_types(nodes: Sequence[onnx.NodeProto]) -> set[str]:
    # Imported lazily: the kernels live in placer.measure (torch), which loading must not need.
    try:
        kernels = importlib.import_module("placer.measure.kernels")
    except ImportError:
        return set()
    ask = getattr(kernels, "unsupported_ops", None)
    if ask is None:
        return set()
    try:
        listed = ask(list(nodes))
    except Exception as exc:  # a kernels bug must not stop loading; the executor reports it
        log.warning("placer.measure.kernels.unsupported_ops failed (%s); assuming every op runs", exc)
        return set()
    # Entries may be "Op" or "domain::Op" or "Op (opset N)"; the op type is the last word before
    # any bracket.
    return {str(e).split("(")[0].strip().split("::")[-1].split(":")[-1] for e in listed}
