"""Reading an ONNX file and the external data files beside it: every weight, or (`weights="shapes"`)
only the small ones, for what needs the graph and its shapes alone (`placer.graph.load.load_graph`)."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper

from placer.errors import PlacerError
from placer.graph.slim import is_large

# load_graph's `weights`: read every weight ("load"), or only what the shapes need ("shapes": the
# large weights of external data stay in their files, for commands that run nothing)
WEIGHTS = ("load", "shapes")


def read_model(path: str | os.PathLike, weights: str = "load") -> onnx.ModelProto:
    """Read an ONNX file with its external data (`weights`: see `load_graph`); a missing or
    unreadable file is a `PlacerError`."""
    return read_file(Path(path), weights)[0]


def read_file(path: Path, weights: str) -> tuple[onnx.ModelProto, str]:
    """The model in `path`, and a one-line note when weights="shapes" left weights unread that a
    real run would need (their files missing or unreadable), else ""."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, not {weights!r}")
    if not path.exists():
        raise PlacerError(f"model file {path} does not exist; give the path of an .onnx file "
                          "or a zoo name such as inception_v3.onnx")
    if not path.is_file():
        raise PlacerError(f"{path} is not a file; give the path of an .onnx file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except DecodeError:
        raise PlacerError(f"{path} is not an ONNX model (it does not parse as an ONNX protobuf); "
                          "give an .onnx file exported by torch.onnx, paddle2onnx, tf2onnx or similar") from None
    except (OSError, ValueError) as exc:
        raise PlacerError(f"cannot read {path} as an ONNX model: {_first_line(exc)}") from None
    if not looks_like_model(model):
        raise PlacerError(f"{path} is not an ONNX model (no graph or opset in it); "
                          "give an .onnx file exported by torch.onnx, paddle2onnx, tf2onnx or similar")
    if weights == "load":
        load_external_data(model, path)
        return model, ""
    return model, _read_small_weights(model, path)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _external_tensors(model: onnx.ModelProto, path: Path) -> tuple[list[onnx.TensorProto], list[str]]:
    """The tensors kept in external data files, and the files missing beside `path`."""
    tensors = [t for t in external_data_helper._get_all_tensors(model) if external_data_helper.uses_external_data(t)]
    locations = sorted({external_data_helper.ExternalDataInfo(t).location for t in tensors})
    return tensors, [loc for loc in locations if not (path.parent / loc).is_file()]


def load_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Read the weights a model keeps in separate files, which live next to it."""
    tensors, missing = _external_tensors(model, path)
    if missing:
        raise PlacerError(f"{path} keeps its weights in external data files that are missing: "
                          f"{', '.join(missing)}; put them next to the model, as it was saved")
    _read_tensors(tensors, path)


def _read_tensors(tensors: list[onnx.TensorProto], path: Path) -> None:
    try:
        for t in tensors:
            external_data_helper.load_external_data_for_tensor(t, str(path.parent))
    except (OSError, ValueError, onnx.checker.ValidationError) as exc:
        raise PlacerError(f"cannot read the external data of {path}: {_first_line(exc)}") from None


def _read_small_weights(model: onnx.ModelProto, path: Path) -> str:
    """Read the small tensors of the external data (shape constants: inference reads them), never
    the large ones; a note, not an error, when the files cannot be read: shapes need none of them."""
    tensors, missing = _external_tensors(model, path)
    try:
        if missing:
            raise PlacerError(f"its external data files are missing: {', '.join(missing)}")
        _read_tensors([t for t in tensors if not is_large(t)], path)
    except PlacerError as exc:
        return (f"the weights of {path} were not read ({exc}); this command needs their shapes only, "
                "a real run of the model needs them")
    return ""


def looks_like_model(model: onnx.ModelProto) -> bool:
    # Protobuf parses many byte strings without complaint; a real model has these.
    return model.ir_version > 0 and len(model.opset_import) > 0 and model.HasField("graph") \
        and (len(model.graph.node) > 0 or len(model.graph.output) > 0)
