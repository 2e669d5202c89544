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

from graphs.registry import SEED, build_model, get, make_options
from graphs.spec import OnnxZooModel
from placer.errors import PlacerError

log = logging.getLogger(__name__)

# One fixed opset: the same options must give the same bytes on every machine with this torch.
OPSET = 17


def export_model(name: str, *, location: str | None = None, **options: int | None) -> onnx.ModelProto:
    """The zoo model `name` as a checked ONNX model (batch-norm folded, static shapes), its weights
    in memory whatever their size; but a model built directly as ONNX (a Llama shape) too large to hold
    its weights refers to the external data file `location` (default NAME.onnx.data) instead."""
    entry = get(name)
    opts = make_options(name, **options)
    if isinstance(entry, OnnxZooModel):
        proto = entry.build(opts, location or f"{name}.onnx.data", SEED)
    else:
        proto = _torch_export(name, opts)
    proto.doc_string = f"placer zoo: {entry.description}"
    for key, value in (("placer.zoo.name", name), ("placer.zoo.options", json.dumps(dataclasses.asdict(opts)))):
        proto.metadata_props.add(key=key, value=value)
    if not is_large(proto) and not external_length(proto):   # else checked from its files, as the checker reads them
        onnx.checker.check_model(proto)
    return proto


def _torch_export(name: str, opts) -> onnx.ModelProto:
    """The torch model `name` at options `opts`, exported."""
    entry = get(name)
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
        return onnx.load(str(exported))


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


def external_length(proto: onnx.ModelProto) -> int:
    """The length of the external data file that `proto`'s weights refer to without holding them
    (0 when they are all inside it)."""
    ends = [0]
    for tensor in proto.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            info = {entry.key: int(entry.value) for entry in tensor.external_data if entry.key in ("offset", "length")}
            ends.append(info.get("offset", 0) + info["length"])
    return max(ends)


def save_weightless(proto: onnx.ModelProto, path: Path, *, sparse: bool) -> Path:
    """`proto`, whose weights refer to `path`.data without holding them, as `path`. The data file is
    created sparse at its full length (it reads as zeros and takes no disk), or, with `sparse` False,
    left absent (a stale one removed: it would not match). Written as `save_large` writes."""
    data = path.with_name(path.name + ".data")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{path.name}.", dir=path.parent) as folder:
        staged, staged_data = Path(folder) / path.name, Path(folder) / data.name
        staged.write_bytes(proto.SerializeToString())
        with open(staged_data, "wb") as handle:
            handle.truncate(external_length(proto))
        onnx.checker.check_model(str(staged))   # it wants the data file there, though it reads none of it
        if sparse:
            os.replace(staged_data, data)
        else:
            data.unlink(missing_ok=True)
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
           data: str = "sparse", **options: int | None) -> Path:
    """Export zoo model `name` to `path` (None options keep the defaults); returns the path.

    Model-specific options (e.g. `layers` for the transformer) pass as keywords. A model too large to
    hold its weights (`llama2_70b`) gets its data file `path`.data created sparse (`data="sparse"`) or
    not at all (`data="absent"`).
    """
    if data not in ("sparse", "absent"):
        raise PlacerError(f"data must be 'sparse' or 'absent', got {data!r}")
    if seq_len is not None:
        options["seq_len"] = seq_len
    path = Path(path)
    proto = export_model(name, batch=batch, location=f"{path.name}.data", **options)
    if external_length(proto):
        save_weightless(proto, path, sparse=data == "sparse")
    elif is_large(proto):
        path.parent.mkdir(parents=True, exist_ok=True)
        save_large(proto, path)
    else:
        write_atomic(proto.SerializeToString(), path)
    log.info("exported %s (%d nodes) to %s", name, len(proto.graph.node), path)
    return path
