"""The zoo's catalogue: name -> `ZooModel`, and building a seeded model from options."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from graphs import inception_v3, llama, nmt, resnet50, rnnlm, transformer
from graphs.spec import OnnxZooModel, ZooModel
from placer.errors import PlacerError

# Every export starts from this seed, so the same options always give the same weights and inputs.
SEED = 0

MODELS: dict[str, ZooModel] = {entry.name: entry for entry in (
    inception_v3.ENTRY,
    resnet50.ENTRY,
    rnnlm.ENTRY,
    nmt.ENTRY,
    transformer.ENTRY,
)}

# Models built directly as ONNX, apart: a sweep over `names()` (benchmarks, every-model tests) must not
# export and run a 70B-parameter shape.
ONNX_MODELS: dict[str, OnnxZooModel] = {entry.name: entry for entry in llama.ENTRIES}


def names() -> list[str]:
    """The names of the zoo's torch models, in catalogue order."""
    return list(MODELS)


def onnx_names() -> list[str]:
    """The names of the zoo's models built directly as ONNX (the Llama shapes), in catalogue order."""
    return list(ONNX_MODELS)


def get(name: str) -> ZooModel | OnnxZooModel:
    """The zoo entry called `name`; PlacerError listing the zoo when there is none."""
    entry = MODELS.get(name) or ONNX_MODELS.get(name)
    if entry is None:
        raise PlacerError(f"{name!r} is not a zoo model; the zoo has: {', '.join([*MODELS, *ONNX_MODELS])}")
    return entry


def make_options(name: str, **options: int | None) -> Any:
    """The options dataclass of `name` with the given values (None keeps the default), checked."""
    entry = get(name)
    fields = {f.name for f in dataclasses.fields(entry.options)}
    given = {key: value for key, value in options.items() if value is not None}
    unknown = sorted(set(given) - fields)
    if unknown:
        raise PlacerError(f"{name} has no option {', '.join(unknown)}; its options are: {', '.join(sorted(fields))}")
    for key, value in given.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PlacerError(f"{name}: option {key} must be a positive integer, got {value!r}")
    return entry.options(**given)


def build_model(name: str, **options: int | None) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The zoo model `name` in eval mode with seeded weights, and seeded example inputs."""
    entry = get(name)
    if isinstance(entry, OnnxZooModel):
        raise PlacerError(f"{name} is built directly as ONNX and has no torch model; export it instead")
    opts = make_options(name, **options)
    # fork_rng: seeding must not disturb the caller's random stream
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = entry.model(opts).eval()
        inputs = entry.example_inputs(opts)
    return model, inputs


def parameter_count(name: str, **options: int | None) -> int:
    """Number of parameters of `name`, counted on the meta device (no memory, no init cost)."""
    entry = get(name)
    opts = make_options(name, **options)
    if isinstance(entry, OnnxZooModel):
        return entry.parameters(opts)
    with torch.device("meta"):
        model = entry.model(opts)
    return sum(p.numel() for p in model.parameters())


def input_shapes(name: str, **options: int | None) -> dict[str, tuple[int, ...]]:
    """Graph input name -> shape for these options (computed on the meta device)."""
    entry = get(name)
    opts = make_options(name, **options)
    if isinstance(entry, OnnxZooModel):
        return entry.input_shapes(opts)
    with torch.device("meta"):
        inputs = entry.example_inputs(opts)
    return {n: tuple(t.shape) for n, t in zip(entry.input_names, inputs)}
