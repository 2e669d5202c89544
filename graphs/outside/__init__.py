"""Models from outside the zoo: real architectures, written with torch, that placer is tested on
as a user's own export (`--graph model.onnx`), never by a zoo name."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from pathlib import Path

import onnx
import torch
from torch import nn

from graphs.export import OPSET, write_atomic


def export_module(model: nn.Module, inputs: tuple[torch.Tensor, ...], path: str | Path, input_names: list[str],
                  output_names: list[str]) -> Path:
    """Export an eval-mode module as a user would (the TorchScript exporter, batch norm folded,
    static shapes), check it and write it atomically; returns the path."""
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, buffer, dynamo=False, opset_version=OPSET, input_names=input_names,
                          output_names=output_names, do_constant_folding=True,
                          training=torch.onnx.TrainingMode.EVAL)
    proto = onnx.load_from_string(buffer.getvalue())
    onnx.checker.check_model(proto)
    path = Path(path)
    write_atomic(proto.SerializeToString(), path)
    return path


def export_image_model(make: Callable[[], nn.Module], path: str | Path, size: int, batch: int, seed: int,
                       output_name: str) -> Path:
    """Export the eval-mode module `make` builds under `seed` (its weights seeded, the global RNG
    left as it was) with a static `batch x 3 x size x size` input named `images` (a multiple of
    32: the deepest stride of these detectors and classifiers); returns the path."""
    if size % 32:
        raise ValueError(f"the input size must be a multiple of 32 (the deepest stride), not {size}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = make().eval()
        images = torch.rand(batch, 3, size, size)
    return export_module(model, (images,), path, ["images"], [output_name])
