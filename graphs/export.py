"""Exporting a zoo model to ONNX: deterministic bytes, checked, written atomically."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import tempfile
import warnings
from pathlib import Path

import onnx
import torch

from graphs.registry import build_model, get, make_options

log = logging.getLogger(__name__)

# One fixed opset: the same options must give the same bytes on every machine with this torch.
OPSET = 17


def export_model(name: str, **options: int | None) -> onnx.ModelProto:
    """The zoo model `name` as a checked ONNX model (batch-norm folded, static shapes)."""
    entry = get(name)
    opts = make_options(name, **options)
    model, inputs = build_model(name, **dataclasses.asdict(opts))
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        # the legacy TorchScript exporter: deterministic, folds eval-mode batch-norm into convs
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(model, inputs, buffer, dynamo=False, opset_version=OPSET,
                          input_names=list(entry.input_names), output_names=list(entry.output_names),
                          do_constant_folding=True, training=torch.onnx.TrainingMode.EVAL)
    proto = onnx.load_from_string(buffer.getvalue())
    proto.doc_string = f"placer zoo: {entry.description}"
    for key, value in (("placer.zoo.name", name), ("placer.zoo.options", json.dumps(dataclasses.asdict(opts)))):
        proto.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(proto)
    return proto


def write_atomic(data: bytes, path: Path) -> None:
    """Write `data` to `path` via a temporary file in the same folder and a rename, so a reader
    (or a second writer) never sees a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def export(name: str, path: str | os.PathLike, *, batch: int | None = None, seq_len: int | None = None,
           **options: int | None) -> Path:
    """Export zoo model `name` to `path` (None options keep the defaults); returns the path.

    Model-specific options (e.g. `layers` for the transformer) pass as keywords.
    """
    if seq_len is not None:
        options["seq_len"] = seq_len
    proto = export_model(name, batch=batch, **options)
    path = Path(path)
    write_atomic(proto.SerializeToString(), path)
    log.info("exported %s (%d nodes) to %s", name, len(proto.graph.node), path)
    return path
