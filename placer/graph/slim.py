"""A weight-free copy of a model for the passes that serialise it (checker, inliner, shape
inference): large initializers become graph inputs of the same type and shape.

Protobuf cannot serialise more than 2 GB, and copying hundreds of MB of weights through C++
for every pass is slow; none of those passes needs the values of large weights (shape-carrying
constants are small and stay)."""

from __future__ import annotations

import onnx

# Initializers at or below this size keep their values: shape inference's data propagation
# reads small constants (Reshape targets, Slice bounds, Resize scales).
SMALL_INITIALIZER_BYTES = 4096


def _nbytes(t: onnx.TensorProto) -> int:
    if t.data_location == onnx.TensorProto.EXTERNAL:
        for entry in t.external_data:
            if entry.key == "length":
                return int(entry.value)
        return SMALL_INITIALIZER_BYTES + 1
    return t.ByteSize()


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
    """A copy of `model` without its large initializers, which become graph inputs.

    Returns the copy and the names of the initializers moved, for `with_weights`."""
    slim = onnx.ModelProto()
    _copy_fields(model, slim, skip={"graph"})
    graph, out = model.graph, slim.graph
    _copy_fields(graph, out, skip={"initializer", "input"})
    out.input.extend(graph.input)
    listed = {i.name for i in graph.input}
    moved: list[str] = []
    for t in graph.initializer:
        if _nbytes(t) <= SMALL_INITIALIZER_BYTES:
            out.initializer.append(t)
            continue
        moved.append(t.name)
        if t.name not in listed:
            out.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return slim, moved


def with_weights(slim: onnx.ModelProto, original: onnx.ModelProto, moved: list[str]) -> onnx.ModelProto:
    """`slim` (possibly changed by passes) with `original`'s initializers back, in file order,
    and the inputs `slim_copy` added for them removed."""
    listed = {i.name for i in original.graph.input}
    added = set(moved) - listed
    inputs = [i for i in slim.graph.input if i.name not in added]
    del slim.graph.input[:]
    slim.graph.input.extend(inputs)
    del slim.graph.initializer[:]
    slim.graph.initializer.extend(original.graph.initializer)
    return slim
