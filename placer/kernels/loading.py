"""Load a graph with placer's own kernels: `placer.graph` cannot import them (it sits below
`placer.kernels`), so this is where the two meet."""

from __future__ import annotations

import os
from collections.abc import Mapping

import onnx

from placer.graph import load
from placer.graph.opgraph import OpGraph


def load_graph(path_or_model: str | os.PathLike | onnx.ModelProto,
               input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> OpGraph:
    """`placer.graph.load.load_graph` with the kernel table (which ops can run) and the reference
    interpreter (one real run finishes the shapes inference cannot find)."""
    from placer.kernels import is_supported
    from placer.kernels.reference import run_model

    return load.load_graph(path_or_model, input_shapes, run_model=run_model, is_supported=is_supported)
