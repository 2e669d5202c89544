"""Load a graph with placer's own kernels: `placer.graph` cannot import them (it sits below
`placer.kernels`), so this is where the two meet. It takes what the commands take, so the Python
API and the Gymnasium environment load a model as `--graph`, `--input-shape` and `--inputs` do."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from placer.graph import load
from placer.graph.feeds import read_inputs
from placer.graph.opgraph import OpGraph

# --input-shape's bindings: {name: shape}, or the command line's ["x=1x3x224x224", ...]
InputShapes = Mapping[str, tuple[int, ...]] | Sequence[str]
# --inputs: {name: array}, or the path of an .npz file of them
SampleInputs = Mapping[str, np.ndarray] | str | os.PathLike


def load_graph(path_or_model: str | os.PathLike | onnx.ModelProto, input_shapes: InputShapes | None = None,
               inputs: SampleInputs | None = None, *, inputs_label: str | None = None,
               weights: str = "load") -> OpGraph:
    """`placer.graph.load.load_graph` with the kernel table (which ops can run) and the reference
    interpreter (one real run, fed `inputs`, finishes the shapes inference cannot find).

    `path_or_model` is an ONNX file, a zoo name such as "resnet50.onnx" (exported on first use,
    as --graph does) or a `ModelProto`; `input_shapes` binds dynamic dimensions as --input-shape
    does; `inputs` are the sample inputs of --inputs (see `placer.graph.load.load_graph`), and
    `inputs_label` where they came from, for messages (default: the path, or "inputs="); `weights`
    "shapes" leaves large external weights unread, for what runs nothing (see there)."""
    from placer.kernels import is_supported
    from placer.kernels.reference import run_model

    if input_shapes is not None and not isinstance(input_shapes, Mapping):
        input_shapes = load.parse_input_shapes(input_shapes)
    label = inputs_label or (f"--inputs {os.fspath(inputs)}" if isinstance(inputs, (str, os.PathLike)) else "inputs=")
    if isinstance(inputs, (str, os.PathLike)):   # read before a zoo export, so a bad file costs nothing
        inputs = read_inputs(inputs)
    if isinstance(path_or_model, (str, os.PathLike)):
        from graphs import resolve   # the zoo: a name not on disk is exported into its cache

        path_or_model = resolve(path_or_model)
    return load.load_graph(path_or_model, input_shapes, weights=weights, run_model=run_model,
                           is_supported=is_supported, inputs=inputs, inputs_label=label)
