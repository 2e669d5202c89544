"""The graph hash that placements refer to (`placer inspect --json` reports it).

It identifies what a model computes, not how the file stores it, so that everything placer
does to a file keeps it: the annotations `placer apply` writes (node metadata ``placer.*`` and
``layer_ann``, node ``device_configurations``, the model ``configuration``), generated node
names written back, bound input shapes, inferred value_info, inlined local functions, a
topological re-ordering, and weights moved into or out of external data.

Large weights (`slim.is_large`) count by name, dtype and shape, not value, so that the hash needs no
weights read (a 70B model's are 140 GB); small initializers (shape constants, which decide what the
graph computes) count by value. Hashes placer wrote before that (``placer.graph/1``, every weight by
value) are `legacy_graph_sha256`."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper

from placer.graph.slim import is_large, slim_copy
from placer.graph.structure import node_names, topological_order

_ANNOTATION_KEYS = ("layer_ann",)
_ANNOTATION_PREFIX = "placer."
# NodeProto.device_configurations exists from ONNX 1.18 (IR 11, multi-device execution).
_HAS_DEVICE_CONFIGS = "device_configurations" in onnx.NodeProto.DESCRIPTOR.fields_by_name


def _is_annotation(key: str) -> bool:
    return key.startswith(_ANNOTATION_PREFIX) or key in _ANNOTATION_KEYS


def _canonical_node(node: onnx.NodeProto, name: str) -> bytes:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.name = name
    copy.doc_string = ""
    keep = [p for p in copy.metadata_props if not _is_annotation(p.key)]
    del copy.metadata_props[:]
    copy.metadata_props.extend(keep)
    if _HAS_DEVICE_CONFIGS:
        copy.ClearField("device_configurations")
    return copy.SerializeToString(deterministic=True)


def _header(t: onnx.TensorProto) -> hashlib._Hash:
    h = hashlib.sha256()
    h.update(f"{t.name}|{t.data_type}|{tuple(t.dims)}|".encode())
    return h


def _shape_digest(t: onnx.TensorProto) -> bytes:
    """A large weight by name, dtype and shape; a small one by value, unless it sits in an
    external data file that was not read (then by where it is too)."""
    if is_large(t):
        return _header(t).digest()
    if external_data_helper.uses_external_data(t):
        h = _header(t)
        h.update(external_data_helper.ExternalDataInfo(t).location.encode())
        return h.digest()
    return _value_digest(t)


def _value_digest(t: onnx.TensorProto) -> bytes:
    h = _header(t)
    if t.HasField("raw_data"):
        # raw_data is the little-endian array bytes, exactly what the typed fields decode to
        # on this (little-endian) machine, so both storages hash alike without a copy.
        h.update(t.raw_data)
        return h.digest()
    array = numpy_helper.to_array(t)
    if array.dtype == object:  # string tensors: hash the values, not object pointers
        for value in array.ravel():
            data = value if isinstance(value, bytes) else str(value).encode()
            h.update(len(data).to_bytes(8, "little") + data)
    else:
        h.update(np.ascontiguousarray(array).tobytes())
    return h.digest()


def canonical_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """The weight-free, function-inlined form of `model` whose nodes the hash covers."""
    slim, _ = slim_copy(model)
    if slim.functions:
        from onnx import inliner

        slim = inliner.inline_local_functions(slim)
    return slim


def graph_sha256(model: onnx.ModelProto) -> str:
    """Hex sha256 of what `model`'s graph computes (see the module docstring for what it ignores).

    Needs no large weight read: external data may be loaded or not, the hash is the same."""
    return _hash(model, b"placer.graph/2\n", _shape_digest)


def legacy_graph_sha256(model: onnx.ModelProto, base_dir: str | Path | None = None) -> str | None:
    """The hash placer recorded before large weights were hashed by shape (every initializer by
    value), so that what it wrote then is still this graph's; external data not loaded is read
    from `base_dir` one tensor at a time. None when a weight cannot be read."""
    def digest(t: onnx.TensorProto) -> bytes:
        if not external_data_helper.uses_external_data(t):
            return _value_digest(t)
        loaded = onnx.TensorProto()
        loaded.CopyFrom(t)
        external_data_helper.load_external_data_for_tensor(loaded, str(base_dir))
        return _value_digest(loaded)

    if base_dir is None and any(external_data_helper.uses_external_data(t) for t in model.graph.initializer):
        return None
    try:
        return _hash(model, b"placer.graph/1\n", digest)
    except (OSError, ValueError, onnx.checker.ValidationError):   # the weights are not there: nothing to match
        return None


def _hash(model: onnx.ModelProto, version: bytes, initializer_digest: Callable[[onnx.TensorProto], bytes]) -> str:
    slim = canonical_model(model)
    graph = slim.graph
    nodes = list(graph.node)
    names = node_names(nodes)
    available = [i.name for i in graph.input] + [t.name for t in graph.initializer]
    try:
        order = topological_order(nodes, available)
    except Exception:  # an invalid graph still gets a hash; loading reports the problem
        order = list(range(len(nodes)))
    h = hashlib.sha256(version)
    for imp in sorted(slim.opset_import, key=lambda o: o.domain):
        h.update(f"opset {imp.domain} {imp.version}\n".encode())
    weights = {t.name for t in model.graph.initializer}
    for value in graph.input:
        if value.name in weights:
            continue
        h.update(f"input {value.name} {value.type.tensor_type.elem_type}\n".encode())
    for value in graph.output:
        h.update(f"output {value.name} {value.type.tensor_type.elem_type}\n".encode())
    for i in order:
        data = _canonical_node(nodes[i], names[i])
        h.update(len(data).to_bytes(8, "little") + data)
    # Initializers in name order, so storage (raw/typed fields, external data, file order) does not
    # matter; slim_copy moved the large ones out of `graph`.
    for t in sorted(model.graph.initializer, key=lambda t: t.name):
        h.update(b"init " + initializer_digest(t))
    for s in sorted(model.graph.sparse_initializer, key=lambda s: s.values.name):
        h.update(b"sparse " + s.SerializeToString(deterministic=True))
    return h.hexdigest()
