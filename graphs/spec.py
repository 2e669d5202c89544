"""`ZooModel`: what the zoo knows about one benchmark graph (how to build it, its options, its I/O)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
