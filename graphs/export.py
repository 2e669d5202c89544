"""Exporting a zoo model to ONNX: deterministic bytes, checked, written atomically."""

from __future__ import annotations

import dataclasses
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
    """The zoo model `name` as a checked ONNX model (batch-norm folded, static shapes), its weights
    in memory whatever their size."""
    entry = get(name)
    opts = make_options(name, **options)
    model, inputs = build_model(name, **dataclasses.asdict(opts))
    with tempfile.TemporaryDirectory(prefix="placer-export-") as folder, warnings.catch_warnings(), torch.no_grad():
        # the legacy TorchScript exporter: deterministic, folds eval-mode batch-norm into convs; to a
        # file, so that a model over protobuf's 2 GiB goes to external data instead of failing
        warnings.simplefilter("ignore", DeprecationWarning)
        exported = Path(folder) / "model.onnx"
        torch.onnx.export(model, inputs, str(exported), dynamo=False, opset_version=OPSET,
                          input_names=list(entry.input_names), output_names=list(entry.output_names),
                          do_constant_folding=True, training=torch.onnx.TrainingMode.EVAL)
        del model
        proto = onnx.load(str(exported))
    proto.doc_string = f"placer zoo: {entry.description}"
    for key, value in (("placer.zoo.name", name), ("placer.zoo.options", json.dumps(dataclasses.asdict(opts)))):
        proto.metadata_props.add(key=key, value=value)
    if not is_large(proto):   # a large one is checked from its files, as the checker reads them
        onnx.checker.check_model(proto)
    return proto


# Protobuf serialises at most 2 GiB; a model whose weights come near it keeps them in a data file
# beside it (ONNX external data), as exporters do. Some room is left for the graph itself.
LARGE_WEIGHT_BYTES = 1_800_000_000


def is_large(proto: onnx.ModelProto) -> bool:
    """Whether `proto`'s weights are too large to serialise it in one file."""
    return sum(len(t.raw_data) for t in proto.graph.initializer) > LARGE_WEIGHT_BYTES


def save_large(proto: onnx.ModelProto, path: Path) -> Path:
    """`proto` as `path` with its weights in `path`.data beside it, both written via temporary files
    and renames (the data first: the model never names a data file that is not whole)."""
    data = path.with_name(path.name + ".data")
    with tempfile.TemporaryDirectory(prefix=f".{path.name}.", dir=path.parent) as folder:
        staged = Path(folder) / path.name
        onnx.save_model(proto, str(staged), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data.name, size_threshold=1024)
        onnx.checker.check_model(str(staged))
        os.chmod(Path(folder) / data.name, staged.stat().st_mode)   # onnx writes it private; readable as the model is
        os.replace(Path(folder) / data.name, data)
        os.replace(staged, path)
    return path


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
    if is_large(proto):
        path.parent.mkdir(parents=True, exist_ok=True)
        save_large(proto, path)
    else:
        write_atomic(proto.SerializeToString(), path)
    log.info("exported %s (%d nodes) to %s", name, len(proto.graph.node), path)
    return path
