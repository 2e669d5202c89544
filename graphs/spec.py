"""`ZooModel`: what the zoo knows about one benchmark graph (how to build it, its options, its I/O);
`OnnxZooModel`: the same for one built directly as ONNX."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import onnx
import torch
from torch import nn


@dataclass(frozen=True)
class ZooModel:
    """One zoo entry. `options` is a frozen dataclass type whose defaults are the default export."""

    name: str
    description: str
    options: type                                   # dataclass of int options (batch, seq_len, ...)
    model: Callable[[Any], nn.Module]               # options -> module (weights from the global RNG)
    example_inputs: Callable[[Any], tuple[torch.Tensor, ...]]  # options -> inputs, in input_names order
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]


@dataclass(frozen=True)
class OnnxZooModel:
    """A zoo entry built directly as ONNX, with no torch module: torch.onnx cannot export a model of tens
    of billions of parameters on one machine. `build(options, location, seed)` gives the model, its
    weights seeded random values or, for a large one, references into the external data file `location`."""

    name: str
    description: str
    options: type                                             # dataclass of int options (batch, seq_len, ...)
    build: Callable[[Any, str | None, int], onnx.ModelProto]
    parameters: Callable[[Any], int]                          # options -> number of weights, from the shapes
    input_shapes: Callable[[Any], dict[str, tuple[int, ...]]]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
