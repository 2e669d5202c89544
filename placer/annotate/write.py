"""Write a placement into an ONNX model as annotations other tools can read.

Three layers, each for a different reader:

- ``metadata_props["placer.device"]`` on every node: the exact device (`read_placement` reads it);
- the ONNX multi-device configuration (IR 11): a `DeviceConfigurationProto` named "placer" that
  lists the devices, and on every node a `NodeDeviceConfigurationProto` whose sharding specs put
  each of the node's tensors whole on the node's device (an unsharded spec over one device index),
  with `pipeline_stage` = the node's stage (as `placer apply --split` cuts the model);
- ``metadata_props["layer_ann"]`` = the device kind, for ONNX Runtime's layer assignment: the
  session option string `ort_layer_settings` returns maps each kind to its execution provider.

Nothing the model computes changes: nodes, weights, inputs and outputs are kept as they are.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import onnx
from onnx import inliner

from placer.annotate.keys import (CONFIG_NAME, DEVICE_KEY, FORMAT_KEY, GRAPH_SHA_KEY, LAYER_KEY, LAYOUT_KEY,
                                  MEASUREMENT_KEY, MIN_IR_VERSION, PLAN_EXTRA_KEY)
from placer.annotate.stages import plan_stages, stage_of_node
from placer.devices import device_kind
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.graph.placement_check import assignment
from placer.graph.structure import node_names as structure_names
from placer.placement import FORMAT, Placement

log = logging.getLogger(__name__)

# protobuf refuses to serialise a message of 2 GiB or more; keep a margin for the envelope.
_INLINE_LIMIT = 2**31 - 2**26
ORT_SETTING = "session.layer_assignment_settings"


def node_names(model: onnx.ModelProto, graph: OpGraph) -> list[str]:
    """The graph's name of each top-level node of `model`, in file order.

    Nodes are matched by the tensors they produce (unique in ONNX), so a node the file left
    nameless gets the generated name `graph` gave it, and names round-trip through the file."""
    by_outputs = {tuple(op.outputs): name for name, op in graph.nodes.items()}
    by_outputs.update({(tensor,): name for name, tensor in graph.constants.items()})
    generated = structure_names(list(model.graph.node))   # what loading named them (folded constants)
    names = []
    for i, node in enumerate(model.graph.node):
        name = by_outputs.get(tuple(node.output))
        if name is None and node.name in graph.nodes:
            name = node.name
        if name is None and generated[i] in graph.constants:
            name = generated[i]
        if name is None:
            raise PlacerError(f"node #{i} ({node.op_type} {node.name!r}) of the model is not in the graph "
                              f"loaded from {graph.source or 'it'}; apply the placement to the same model file")
        names.append(name)
    return names


def apply_placement(model: onnx.ModelProto, placement: Placement, graph: OpGraph) -> onnx.ModelProto:
    """A copy of `model` with `placement` written into it (see the module doc); the input is untouched.

    `graph` is the `OpGraph` loaded from `model`; `placement` must place each of its nodes
    (`resolve_placement` checks that)."""
    # checked here so that a refusal gives apply's advice, not plan_stages' ("check it with placer apply")
    assignment(graph, placement, remedy="give a placement made for this graph")
    stage_of = stage_of_node(plan_stages(graph, placement))
    stage_of.update(graph.constant_devices(stage_of))   # a Constant weight is in its reader's stage
    placement = Placement(placement.devices, {**placement.nodes, **graph.constant_devices(placement.nodes)},
                          placement.graph_sha256, placement.measurement, placement.extra)
    index = {d: i for i, d in enumerate(placement.devices)}

    out = onnx.ModelProto()
    out.CopyFrom(model)
    if out.functions:
        # The graph's nodes are those of the inlined model (placer places ops, not calls), so
        # the placed file is the inlined one; its graph hash is the same.
        out = inliner.inline_local_functions(out)
        del out.functions[:]
    names = node_names(out, graph)
    _clear(out)
    config = out.configuration.add()
    config.name = CONFIG_NAME
    config.num_devices = len(placement.devices)
    config.device.extend(placement.devices)
    overwritten = 0
    for node, name in zip(out.graph.node, names):
        device = placement.nodes[name]
        node.name = name
        overwritten += set_meta(node.metadata_props, LAYER_KEY, device_kind(device))
        set_meta(node.metadata_props, DEVICE_KEY, device)
        node_config = node.device_configurations.add()
        node_config.configuration_id = CONFIG_NAME
        node_config.pipeline_stage = stage_of[name]
        for tensor in dict.fromkeys(t for t in list(node.input) + list(node.output) if t):
            spec = node_config.sharding_spec.add()
            spec.tensor_name = tensor
            spec.device.append(index[device])   # no sharded_dim: the whole tensor, on this one device
    if overwritten:
        log.warning("replaced the %s annotation of %d node(s) that another tool had set", LAYER_KEY, overwritten)

    set_meta(out.metadata_props, FORMAT_KEY, FORMAT)
    if graph.sha256:
        set_meta(out.metadata_props, GRAPH_SHA_KEY, graph.sha256)
    if placement.measurement is not None:
        set_meta(out.metadata_props, MEASUREMENT_KEY, json.dumps(placement.measurement, sort_keys=True))
    out.ir_version = max(out.ir_version, MIN_IR_VERSION)
    return out


def ort_layer_settings(placement: Placement) -> str:
    """The `session.layer_assignment_settings` value that sends each node of an applied model to
    the execution provider of its device kind, e.g. ``cuda(=cuda); cpu(=cpu)``."""
    kinds = dict.fromkeys(device_kind(d) for d in placement.devices if d in set(placement.nodes.values()))
    return "; ".join(f"{kind}(={kind})" for kind in kinds)


def save_model(model: onnx.ModelProto, path: str | Path, weights_from: str | Path | None = None) -> Path:
    """Write `model` to `path` (weights to a side file when too big for one protobuf) and check it
    with onnx.checker from the file, so large models are checked too. Weights `model` still keeps
    in external data files beside `weights_from` (the model read with only its shapes) are copied
    beside `path` file to file, never read into memory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if weights_from is not None and _carry_external_data(model, Path(weights_from), path):
        onnx.save_model(model, str(path))
        return _checked(path)
    large = model.ByteSize() >= _INLINE_LIMIT
    onnx.save_model(model, str(path), save_as_external_data=large,
                    location=path.name + ".data" if large else None)
    return _checked(path)


def _carry_external_data(model: onnx.ModelProto, source: Path, path: Path) -> bool:
    """Copy the external data files `model`'s tensors refer to (beside the model `source`) beside
    `path`, as `<path name>.data` (`.data1`, ... for more files), and point the tensors there;
    False when no tensor is external. A missing file is a `PlacerError`."""
    import shutil

    from onnx import external_data_helper

    tensors = [t for t in external_data_helper._get_all_tensors(model) if external_data_helper.uses_external_data(t)]
    if not tensors:
        return False
    locations = list(dict.fromkeys(external_data_helper.ExternalDataInfo(t).location for t in tensors))
    renamed = {loc: f"{path.name}.data" + (str(k) if k else "") for k, loc in enumerate(locations)}
    for loc, new in renamed.items():
        if not (source.parent / loc).is_file():
            raise PlacerError(f"{source} keeps its weights in {loc}, which is missing, and the model written "
                              "carries them; put the file next to the model, as it was saved")
        if (source.parent / loc).resolve() != (path.parent / new).resolve():
            shutil.copyfile(source.parent / loc, path.parent / new)   # in chunks: no weight held in memory
    for t in tensors:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = renamed[entry.value]
    return True


def _checked(path: Path) -> Path:
    """`path`, checked by onnx.checker from the file (so a large model is checked too)."""
    try:
        onnx.checker.check_model(str(path))
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid model"
        raise PlacerError(f"the model written to {path} fails onnx.checker ({first}); "
                          "check that the input model passes onnx.checker") from None
    return path


def _clear(model: onnx.ModelProto) -> None:
    """Drop the annotations a previous `placer apply` wrote, so re-applying replaces them."""
    keep = [c for c in model.configuration if c.name != CONFIG_NAME]
    del model.configuration[:]
    model.configuration.extend(keep)
    for node in model.graph.node:
        if any(e.key == DEVICE_KEY for e in node.metadata_props):
            del_meta(node.metadata_props, LAYER_KEY)   # ours, not another tool's
            del_meta(node.metadata_props, DEVICE_KEY)
        del_meta(node.metadata_props, LAYOUT_KEY)   # a plan's (placer.plans.export)
        keep_nodes = [c for c in node.device_configurations if c.configuration_id != CONFIG_NAME]
        del node.device_configurations[:]
        node.device_configurations.extend(keep_nodes)
    for key in (FORMAT_KEY, GRAPH_SHA_KEY, MEASUREMENT_KEY, PLAN_EXTRA_KEY):
        del_meta(model.metadata_props, key)


def set_meta(props, key: str, value: str) -> int:
    """Set `key` in a repeated StringStringEntryProto; 1 if it replaced a different value."""
    for entry in props:
        if entry.key == key:
            changed = int(entry.value != value)
            entry.value = value
            return changed
    entry = props.add()
    entry.key, entry.value = key, value
    return 0


def del_meta(props, key: str) -> None:
    """Remove `key` from a repeated StringStringEntryProto, if there."""
    keep = [e for e in props if e.key != key]
    if len(keep) != len(props):
        del props[:]
        props.extend(keep)
