"""`resolve`: turn a --graph argument into an ONNX file, exporting zoo models into a cache."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path

import torch

from graphs.export import OPSET, export
from graphs.registry import get, make_options, names, onnx_names
from placer.errors import PlacerError

# Bump when a zoo model's definition changes, so caches made by older code are not reused.
ZOO_VERSION = 1


def cache_dir() -> Path:
    """Where zoo exports are cached: $PLACER_CACHE/zoo, else ~/.cache/placer/zoo."""
    root = os.environ.get("PLACER_CACHE") or Path.home() / ".cache" / "placer"
    return Path(root) / "zoo"


def cached_path(name: str) -> Path:
    """The cache file of `name` at default options. The folder is keyed by everything that
    changes the bytes (zoo version, torch version, opset, options), so stale exports are never used."""
    opts = make_options(name)
    key = json.dumps([ZOO_VERSION, torch.__version__, OPSET, name, dataclasses.asdict(opts)])
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir() / digest / f"{name}.onnx"


def _zoo_name(graph_arg: str) -> str | None:
    """The zoo name a bare `NAME.onnx` (or `NAME`) refers to, else None."""
    if os.sep in graph_arg or (os.altsep and os.altsep in graph_arg):
        return None  # a path with folders means a file the user has, not a zoo model
    stem = graph_arg[:-len(".onnx")] if graph_arg.endswith(".onnx") else graph_arg
    return stem if stem in names() + onnx_names() else None


def resolve(graph_arg: str | os.PathLike) -> Path:
    """The ONNX file `graph_arg` names: an existing file as is; a missing `NAME.onnx` with NAME in
    the zoo exported (default options) into the cache on first use; otherwise PlacerError."""
    graph_arg = os.fspath(graph_arg)
    path = Path(graph_arg)
    if path.is_file():
        return path
    if path.is_dir():
        raise PlacerError(f"{graph_arg} is a folder; --graph takes an ONNX file or a zoo name")
    name = _zoo_name(graph_arg)
    if name is None:
        zoo = ", ".join(f"{n}.onnx" for n in names() + onnx_names())
        raise PlacerError(f"{graph_arg} does not exist; give an ONNX file or a zoo model: {zoo}")
    target = cached_path(get(name).name)
    if not target.is_file():
        # progress, not a warning: the first use of a zoo model waits seconds for its export
        print(f"exporting zoo model {name} to {target} (first use)", file=sys.stderr, flush=True)
        try:
            export(name, target)
        except OSError as exc:
            raise PlacerError(f"cannot write the zoo cache {target.parent}: {exc.strerror or exc}; "
                              "set PLACER_CACHE to a writable folder") from exc
    return target
