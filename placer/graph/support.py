"""Which device kinds can run each node: the caller says which ops have a kernel (placer's
kernel table lives above this package, in `placer.kernels`); without it every
standard-domain op is assumed to run on both the CPU and CUDA."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import onnx

from placer.graph.structure import STANDARD_DOMAINS, canonical_domain

# The torch kernels run wherever torch runs; a kind is lost only where no kernel exists.
ALL_KINDS = frozenset({"cpu", "cuda"})

# is_supported(op_type, opset, domain) -> whether a kernel exists, as `placer.kernels.is_supported`.
KernelTable = Callable[[str, int, str], bool]


def device_kinds(nodes: Sequence[onnx.NodeProto], opsets: Mapping[str, int],
                 is_supported: KernelTable | None = None) -> list[frozenset[str]]:
    """The device kinds that can run each of `nodes` (empty: no kernel for it anywhere)."""
    result = []
    for node in nodes:
        domain = canonical_domain(node.domain)
        ok = node.domain in STANDARD_DOMAINS and (
            is_supported is None or bool(is_supported(node.op_type, opsets.get(domain, opsets.get("", 1)), domain)))
        result.append(ALL_KINDS if ok else frozenset())
    return result
