"""Engines that run placements for real, behind one protocol (`placer.engines.protocol.Engine`):
placer's torch executor (`engines/torch/`) and ONNX Runtime (`engines/onnxruntime/`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from placer.devices import Device
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph

ENGINES = ("torch", "onnxruntime")
TRAINING_REFUSED = "the training objective runs on the torch engine; drop --engine onnxruntime"


def check_engine(engine: str, objective: str = "inference") -> None:
    """An unknown engine, or the training objective on ONNX Runtime (forward passes only), is a
    `PlacerError` said in one line."""
    if engine not in ENGINES:
        raise PlacerError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if engine == "onnxruntime" and objective == "training":
        raise PlacerError(TRAINING_REFUSED)


def make_engine(engine: str, graph: OpGraph, devices: Sequence[Device], inputs: Mapping[str, np.ndarray], *,
                prepared=None, training=None, pipeline=None, timeout_s: float = 60.0):
    """The engine named `engine` for `graph` on `devices`, fed `inputs` (every graph input) each step."""
    check_engine(engine, "training" if training is not None else "inference")
    if engine == "onnxruntime":
        from placer.engines.onnxruntime.engine import OrtEngine   # onnxruntime loads only when asked for

        return OrtEngine(graph, devices, inputs, prepared=prepared, pipeline=pipeline, timeout_s=timeout_s)
    from placer.engines.torch.engine import TorchEngine

    return TorchEngine(graph, devices, inputs, prepared=prepared, training=training, pipeline=pipeline,
                       timeout_s=timeout_s)
