"""Read a placement back from an ONNX model's annotations (see `placer.annotate.write`)."""

from __future__ import annotations

import json
import logging

import onnx

from placer.annotate.keys import CONFIG_NAME, DEVICE_KEY, GRAPH_SHA_KEY, MEASUREMENT_KEY
from placer.errors import PlacerError
from placer.placement import Placement

log = logging.getLogger(__name__)


def read_placement(model: onnx.ModelProto) -> Placement | None:
    """The placement stored in `model`, or None if it has none.

    Reads ``placer.device`` node metadata first; a model annotated only with the standard ONNX
    multi-device configuration (every node's tensors whole on one named device) is read too."""
    nodes = _from_metadata(model) or _from_device_configurations(model)
    if not nodes:
        return None
    meta = {e.key: e.value for e in model.metadata_props}
    config = _config(model)
    devices = list(config.device) if config is not None else []
    devices += [d for d in dict.fromkeys(nodes.values()) if d not in devices]
    measurement = None
    if MEASUREMENT_KEY in meta:
        try:
            measurement = json.loads(meta[MEASUREMENT_KEY])
        except json.JSONDecodeError:
            log.warning("ignoring the unreadable %s entry of the model", MEASUREMENT_KEY)
    return Placement(devices=devices, nodes=nodes, graph_sha256=meta.get(GRAPH_SHA_KEY) or None,
                     measurement=measurement)


def _from_metadata(model: onnx.ModelProto) -> dict[str, str]:
    nodes: dict[str, str] = {}
    for i, node in enumerate(model.graph.node):
        device = next((e.value for e in node.metadata_props if e.key == DEVICE_KEY), None)
        if device is None:
            continue
        if not node.name:
            raise PlacerError(f"node #{i} ({node.op_type}) has a {DEVICE_KEY} annotation but no name; "
                              "re-run placer apply on the original model")
        nodes[node.name] = device
    return nodes


def _config(model: onnx.ModelProto) -> onnx.DeviceConfigurationProto | None:
    """The placer configuration, else the model's only one (another tool's) if it names devices."""
    configs = list(model.configuration)
    ours = [c for c in configs if c.name == CONFIG_NAME]
    if ours:
        return ours[0]
    if len(configs) == 1 and len(configs[0].device) == configs[0].num_devices > 0:
        return configs[0]
    return None


def _from_device_configurations(model: onnx.ModelProto) -> dict[str, str]:
    """Nodes whose multi-device annotation puts all their tensors, unsharded, on one device."""
    config = _config(model)
    if config is None or not config.device:
        return {}
    nodes: dict[str, str] = {}
    for node in model.graph.node:
        for node_config in node.device_configurations:
            if node_config.configuration_id != config.name or not node.name:
                continue
            specs = node_config.sharding_spec
            if specs and all(len(s.device) == 1 and not s.sharded_dim and not s.index_to_device_group_map
                             for s in specs):
                indices = {s.device[0] for s in specs}
                if len(indices) == 1 and 0 <= (i := indices.pop()) < len(config.device):
                    nodes[node.name] = config.device[i]
    return nodes
