"""A weight-free copy of a model for the passes that serialise it (checker, inliner, shape
inference): large initializers become graph inputs of the same type and shape.

Protobuf cannot serialise more than 2 GB, and copying hundreds of MB of weights through C++
for every pass is slow; none of those passes needs the values of large weights (shape-carrying
constants are small and stay)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import external_data_helper, helper

# Initializers at or below this size keep their values: shape inference's data propagation
# reads small constants (Reshape targets, Slice bounds, Resize scales).
SMALL_INITIALIZER_BYTES = 4096


def _nbytes(t: onnx.TensorProto) -> int:
    # From dims and dtype, not ByteSize(): that serialises the tensor (seconds for GBs).
    if t.data_type == onnx.TensorProto.STRING:
        return t.ByteSize()
    itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    return int(np.prod(t.dims, dtype=np.int64)) * itemsize


def is_large(t: onnx.TensorProto) -> bool:
    """Whether `t` is a weight no pass needs the value of (over SMALL_INITIALIZER_BYTES): `slim_copy`
    moves it out, `graph_sha256` hashes its shape, `load_graph(weights="shapes")` leaves it unread."""
    return _nbytes(t) > SMALL_INITIALIZER_BYTES


def _copy_fields(src, dst, skip: set[str]) -> None:
    """Copy every set field of message `src` into `dst`, except those named in `skip`."""
    for field, value in src.ListFields():
        if field.name in skip:
            continue
        # `is_repeated` replaced `label` in protobuf 6; support both.
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        if repeated:
            getattr(dst, field.name).extend(value)
        elif field.message_type is not None:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


def slim_copy(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of `model` without its large initializers, nor those left in external data files
    (the checker would look for the files), which become graph inputs.

    Returns the copy and the names of the initializers moved, for `with_weights`."""
    slim = onnx.ModelProto()
    _copy_fields(model, slim, skip={"graph"})
    graph, out = model.graph, slim.graph
    _copy_fields(graph, out, skip={"initializer", "input"})
    out.input.extend(graph.input)
    listed = {i.name for i in graph.input}
    moved: list[str] = []
    for t in graph.initializer:
        if not is_large(t) and not external_data_helper.uses_external_data(t):
            out.initializer.append(t)
            continue
        moved.append(t.name)
        if t.name not in listed:
            out.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return slim, moved


def with_weights(slim: onnx.ModelProto, original: onnx.ModelProto, moved: list[str],
                 owned: bool = False) -> onnx.ModelProto:
    """`slim` (possibly changed by passes) with `original`'s initializers back, in file order,
    and the inputs `slim_copy` added for them removed.

    With `owned`, `original` itself becomes the result (its weights are not copied, which
    matters for GBs of them); otherwise it is left as it was."""
    if owned:
        target = original
    else:
        target = onnx.ModelProto()
        target.CopyFrom(original)
    for field, _ in target.ListFields():
        if field.name != "graph":
            target.ClearField(field.name)
    _copy_fields(slim, target, skip={"graph"})
    graph = target.graph
    for field, _ in graph.ListFields():
        if field.name != "initializer":
            graph.ClearField(field.name)
    _copy_fields(slim.graph, graph, skip={"initializer", "input"})
    added = set(moved) - {i.name for i in original.graph.input}
    graph.input.extend(i for i in slim.graph.input if i.name not in added)
    return target
