"""Seeded random inputs for a graph: what runs it when the user gives none.

    random_feeds(graph, seed=0) -> {input name: array}
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph, TensorInfo


def random_feeds(graph: OpGraph | Iterable[TensorInfo], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input (or for the given `TensorInfo`s, as loading has them
    before the graph exists): standard normal floats (the real part of complex ones), zeros for
    integer inputs (always a valid token id or index), False for booleans. An unbound dimension
    is a `PlacerError` that says how to bind it (--input-shape)."""
    inputs = graph.inputs if isinstance(graph, OpGraph) else graph
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for info in inputs:
        if any(d <= 0 for d in info.shape):
            raise PlacerError(f"input {info.name!r} has an unbound dimension {info.shape}; "
                              f"bind it with --input-shape {info.name}=...")
        dtype = np.dtype(info.dtype)
        if dtype.kind in "fc":
            feeds[info.name] = rng.standard_normal(info.shape).astype(dtype)
        else:
            feeds[info.name] = np.zeros(info.shape, dtype=dtype)
    return feeds
