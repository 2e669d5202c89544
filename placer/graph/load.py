"""ONNX model -> `OpGraph`: read and validate the file, name nameless nodes, order the nodes,
bind dynamic dimensions, infer every shape, and compute per-node features."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import networkx as nx
import numpy as np
import onnx

from placer.errors import PlacerError
from placer.graph import shapes
from placer.graph.constants import constants_to_initializers
from placer.graph.feeds import check_sample_inputs
from placer.graph.files import WEIGHTS, load_external_data, looks_like_model, read_file, read_model
from placer.graph.control_flow import CONTROL_FLOW, data_dependence, node_cost, small_constants
from placer.graph.flops import node_flops
from placer.graph.identity import graph_sha256
from placer.graph.opgraph import OpGraph, OpNode, TensorInfo
from placer.graph.slim import slim_copy, with_weights
from placer.graph.structure import STANDARD_DOMAINS, node_inputs, node_names, node_reads, topological_order
from placer.graph.support import KernelTable, device_kinds

log = logging.getLogger(__name__)

__all__ = ["WEIGHTS", "load_graph", "parse_input_shapes", "read_model", "graph_sha256"]

_SHAPE_ARG = re.compile(r"^(?P<name>.+)=(?P<dims>\d+(?:[x,]\d+)*)?$")


def parse_input_shapes(specs: Sequence[str] | None) -> dict[str, tuple[int, ...]]:
    """``["x=1x3x224x224", "ids=2x16"]`` -> ``{"x": (1, 3, 224, 224), "ids": (2, 16)}``.

    ``NAME=`` (nothing after the '=') binds a scalar. Bad syntax and repeated names are `PlacerError`."""
    result: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        m = _SHAPE_ARG.match(spec.strip())
        if not m:
            raise PlacerError(f"cannot read --input-shape {spec!r}; write NAME=1x3x224x224 "
                              "(the input's name, '=', its dimensions joined by 'x')")
        name, dims = m.group("name"), m.group("dims")
        shape = tuple(int(d) for d in re.split(r"[x,]", dims)) if dims else ()
        if any(d <= 0 for d in shape):
            raise PlacerError(f"--input-shape {spec!r} has a dimension of 0; every dimension must be positive")
        if name in result:
            raise PlacerError(f"--input-shape gives input {name!r} twice; give each input once")
        result[name] = shape
    return result


def _weights_for_shapes(model: onnx.ModelProto, path: Path, missing: list[str]) -> None:
    """Read every weight for the real run that finishes the `missing` shapes."""
    try:
        load_external_data(model, path)
    except PlacerError as exc:
        raise PlacerError(f"shape inference leaves {len(missing)} tensors without a static shape, and the real run "
                          f"that finds them needs the weights: {exc}") from None


def _check_domains(model: onnx.ModelProto) -> None:
    custom = sorted({(n.domain, n.op_type) for n in model.graph.node if n.domain not in STANDARD_DOMAINS})
    if custom:
        listed = ", ".join(f"{d}::{op}" for d, op in custom)
        raise PlacerError(f"the model uses ops from custom domains, which placer cannot run: {listed}; "
                          "export it with standard ONNX ops only")


def _check_opset(model: onnx.ModelProto, source: str) -> None:
    # onnx has no schemas for a newer opset: its checker, shape inference and placer's kernels would
    # take the ops on trust (an opset 99 model loaded silently)
    newest, opset = onnx.defs.onnx_opset_version(), _opsets(model).get("")
    if opset is not None and opset > newest:
        raise PlacerError(f"{source} uses ONNX opset {opset}, newer than opset {newest}, the newest this placer knows "
                          f"(onnx {onnx.__version__}); export it with opset {newest} or older")


def _validate(slim: onnx.ModelProto, source: str) -> None:
    try:
        onnx.checker.check_model(slim)
    except onnx.checker.ValidationError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        reason = lines[0] if lines else "invalid"
        raise PlacerError(f"{source} is not a valid ONNX model: {reason}") from None


def _opsets(model: onnx.ModelProto) -> dict[str, int]:
    opsets = {imp.domain: int(imp.version) for imp in model.opset_import}
    if "ai.onnx" in opsets and "" not in opsets:
        opsets[""] = opsets["ai.onnx"]
    return opsets


def load_graph(path_or_model: str | os.PathLike | onnx.ModelProto,
               input_shapes: Mapping[str, tuple[int, ...]] | None = None, *, weights: str = "load",
               run_model: shapes.ModelRunner | None = None, is_supported: KernelTable | None = None,
               inputs: Mapping[str, np.ndarray] | None = None, inputs_label: str = "inputs=") -> OpGraph:
    """Load an ONNX model (a path or a `ModelProto`, which is not modified) as an `OpGraph`.

    `input_shapes` binds inputs' dynamic dimensions (see `parse_input_shapes`). `inputs` are
    sample inputs (name -> array; `inputs_label` says where from, for messages): checked against
    the model first, their shapes bind their inputs, the real run that finishes shapes is fed
    them, and the graph keeps them (`OpGraph.sample_inputs`) for every later run. Every tensor of
    the result has a static shape and dtype; problems a user can fix are `PlacerError`.
    `weights="shapes"` leaves a file's large external weights unread (and missing files a note,
    `OpGraph.weights_note`), for what needs shapes alone; `OpGraph.read_weights` reads them later.
    `run_model` finishes shapes inference cannot find (data-dependent ones) with one real run,
    `is_supported` says which ops have a kernel (see `placer.kernels.loading.load_graph`, which
    passes placer's own); without them such shapes are an error and every op is assumed to run."""
    if isinstance(path_or_model, onnx.ModelProto):
        original, source, origin, note = path_or_model, "the model", path_or_model, ""
        if not looks_like_model(original):
            raise PlacerError("the model given is empty (no graph or opset); pass a loaded ONNX model")
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in original.graph.initializer):
            raise PlacerError("the model given refers to external data that is not loaded; pass its path, "
                              "or load it with onnx.load(path) (which reads the data)")
    else:
        source = origin = str(path_or_model)
        original, note = read_file(Path(source), weights)
    _check_opset(original, source)
    input_shapes = dict(input_shapes or {})
    weights = {t.name for t in original.graph.initializer}
    given = check_sample_inputs(inputs or {}, original.graph, weights, inputs_label)
    for name, array in given.items():   # an array binds its input's shape, as --input-shape does
        if input_shapes.setdefault(name, tuple(array.shape)) != tuple(array.shape):
            raise PlacerError(f"{inputs_label}: array {name!r} has shape {list(array.shape)}, but --input-shape binds "
                              f"{name} to {list(input_shapes[name])}; make them agree, or leave out --input-shape {name}")

    sha256 = graph_sha256(original)
    slim, moved = slim_copy(original)
    if slim.functions:
        # Local functions (dynamo exports, onnxscript) are expanded so each op is a vertex.
        slim = onnx.inliner.inline_local_functions(slim)
        del slim.functions[:]
    _check_domains(slim)

    graph = slim.graph
    nodes = list(graph.node)
    names = node_names(nodes)
    available = [i.name for i in graph.input] + [t.name for t in graph.initializer]
    order = topological_order(nodes, available)
    ordered = []
    for i in order:
        node = onnx.NodeProto()
        node.CopyFrom(nodes[i])
        node.name = names[i]
        ordered.append(node)
    del graph.node[:]
    graph.node.extend(ordered)

    # Binding first: the checker wants every graph input to have a shape, which some files
    # leave to --input-shape.
    bound = shapes.bind_input_shapes(graph, input_shapes, weights)
    _validate(slim, source)
    del graph.value_info[:]  # exporters' hints may carry unbound symbols; inference redoes them
    # Declared output shapes are hints too, and sometimes wrong: shapes come from the ops, and
    # a declared static shape is used only where inference cannot say (e.g. Loop outputs).
    # An output that is an input or an initializer gets its source's type instead: inference
    # takes an output's declared type for the tensor everywhere, so clearing it lost the shapes
    # of its readers' outputs too.
    declared = shapes.declared_output_infos(graph)
    sources = {i.name: i.type for i in graph.input}
    sources.update((t.name, onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))) for t in graph.initializer)
    for value in graph.output:
        if value.name in sources:
            value.type.CopyFrom(sources[value.name])
        elif value.type.HasField("tensor_type"):
            value.type.tensor_type.ClearField("shape")
    infos, missing = shapes.infer_static(slim, _opsets(slim))
    infos.update({n: declared[n] for n in missing if n in declared})
    missing = [n for n in missing if n not in infos]
    # A file read here is ours to reuse; a caller's ModelProto is copied, not changed.
    model = with_weights(slim, original, moved, owned=not isinstance(path_or_model, onnx.ModelProto))
    inputs = [infos[i.name] if i.name in infos else TensorInfo(i.name, bound[i.name], "float32")
              for i in model.graph.input if i.name not in weights]
    if missing:
        if isinstance(origin, str):
            _weights_for_shapes(model, Path(origin), missing)
        infos.update(shapes.complete_shapes(model, missing, inputs, run_model, given))
    shapes.write_value_info(model, {n: infos[n] for n in _node_outputs(model)})
    constants = constants_to_initializers(model)
    weights.update(constants.values())

    for t in model.graph.initializer:
        infos[t.name] = TensorInfo(t.name, tuple(int(d) for d in t.dims), shapes.dtype_name(t.data_type))
    graph = _build(model, infos, inputs, weights, sha256, source, is_supported)
    graph.constants = constants
    graph.sample_inputs = given
    graph.run_shapes = tuple(missing)
    graph.origin, graph.weights_note = origin, note
    return graph


def _node_outputs(model: onnx.ModelProto) -> list[str]:
    return [o for n in model.graph.node for o in n.output if o]


def _build(model: onnx.ModelProto, infos: dict[str, TensorInfo], inputs: list[TensorInfo],
           weights: set[str], sha256: str, source: str, is_supported: KernelTable | None) -> OpGraph:
    opsets = _opsets(model)
    protos = list(model.graph.node)
    kinds = device_kinds(protos, opsets, is_supported)
    constants = small_constants(model.graph)
    # Subgraph tensors get their shapes from inference over the bound model (control flow only).
    typed = list(shapes.infer_shapes(model).graph.node) if any(p.op_type in CONTROL_FLOW for p in protos) else protos
    nodes: dict[str, OpNode] = {}
    for proto, typed_proto, kind in zip(protos, typed, kinds):
        reads = node_reads(proto)
        listed = set(proto.input)
        nodes[proto.name] = OpNode(
            name=proto.name, op_type=proto.op_type, domain=proto.domain,
            opset=opsets.get(proto.domain, opsets.get("", 0)),
            inputs=node_inputs(proto), outputs=tuple(proto.output), proto=proto,
            output_info=tuple(infos[o] for o in proto.output if o),
            param_bytes=sum(infos[t].nbytes for t in dict.fromkeys(reads) if t in weights),
            flops=node_cost(typed_proto, infos, node_flops, constants), device_kinds=kind,
            data_dependence=data_dependence(proto, constants),
            implicit_inputs=tuple(t for t in reads if t not in listed),
        )
    initializers = {t.name: infos[t.name] for t in model.graph.initializer}
    outputs = [infos[o.name] for o in model.graph.output]
    return OpGraph(model=model, nodes=nodes, tensors=dict(infos), inputs=inputs, outputs=outputs,
                   initializers=initializers, opsets=opsets, sha256=sha256,
                   dag=build_dag(nodes, infos), source=source)


def build_dag(nodes: Mapping[str, OpNode], tensors: Mapping[str, TensorInfo]) -> nx.DiGraph:
    """One vertex per node (attribute ``op``); an edge u->v per produced-then-read tensor set,
    with ``tensors`` (names, in v's read order) and ``bytes`` (their total size)."""
    dag = nx.DiGraph()
    producer: dict[str, str] = {}
    for name, node in nodes.items():
        dag.add_node(name, op=node)
        for t in node.outputs:
            if t:
                producer[t] = name
    for name, node in nodes.items():
        for t in dict.fromkeys(node.inputs):
            src = producer.get(t)
            if not t or src is None:
                continue
            if dag.has_edge(src, name):
                dag.edges[src, name]["tensors"].append(t)
                dag.edges[src, name]["bytes"] += tensors[t].nbytes
            else:
                dag.add_edge(src, name, tensors=[t], bytes=tensors[t].nbytes)
    return dag
