"""Read a plan back from an ONNX model that `placer apply` annotated (`placer.plans.export`).

A model annotated with a placement reads as that placement's plan, so every placed model holds
one. A plan's ops come from their sharding specs and `placer.layout` notes (`specs.py`); the model
metadata gives its graph hash, measurement and other fields, and the plan format's version, which
is checked as a plan file's is.
"""

from __future__ import annotations

import json
import logging

import onnx

from placer.annotate.keys import CONFIG_NAME, FORMAT_KEY, GRAPH_SHA_KEY, LAYOUT_KEY, MEASUREMENT_KEY, PLAN_EXTRA_KEY
from placer.annotate.read import read_placement
from placer.errors import PlacerError
from placer.plans.plan import NAME, Plan
from placer.plans.specs import from_specs

log = logging.getLogger(__name__)


def holds_plan(model: onnx.ModelProto) -> bool:
    """Whether `model` was annotated with a plan that splits ops (not with a placement)."""
    fmt = next((e.value for e in model.metadata_props if e.key == FORMAT_KEY), "")
    return fmt.startswith(f"{NAME}/")


def read_plan(model: onnx.ModelProto) -> Plan | None:
    """The plan stored in `model` (a placement's as its plan), or None if it holds neither."""
    if not holds_plan(model):
        placement = read_placement(model)
        return None if placement is None else Plan.from_placement(placement)
    meta = {e.key: e.value for e in model.metadata_props}
    config = next((c for c in model.configuration if c.name == CONFIG_NAME), None)
    if config is None:
        raise PlacerError(f"the model says it holds a plan ({meta[FORMAT_KEY]}) but has no device configuration "
                          f"{CONFIG_NAME!r}; re-run placer apply on the original model")
    devices = dict(enumerate(config.device))
    ops = {}
    for i, node in enumerate(model.graph.node):
        configs = [c for c in node.device_configurations if c.configuration_id == CONFIG_NAME]
        if not configs:
            continue
        if not node.name:
            raise PlacerError(f"node #{i} ({node.op_type}) has a plan's annotation but no name; "
                              "re-run placer apply on the original model")
        note = next((e.value for e in node.metadata_props if e.key == LAYOUT_KEY), None)
        ops[node.name] = from_specs(configs[0].sharding_spec, list(node.input), list(node.output), devices, note,
                                    node.name).to_dict()
    # through the plan file's reader, so the format's version and every field are checked as a file's are
    data = {"format": meta[FORMAT_KEY], "graph": {"sha256": meta.get(GRAPH_SHA_KEY) or None},
            "devices": list(config.device), "ops": ops, **_json(meta, PLAN_EXTRA_KEY, {})}
    measurement = _json(meta, MEASUREMENT_KEY, None)
    if measurement is not None:
        data["measurement"] = measurement
    return Plan.from_dict(data, "the model's plan")


def _json(meta: dict[str, str], key: str, default):
    if key not in meta:
        return default
    try:
        return json.loads(meta[key])
    except json.JSONDecodeError:
        log.warning("ignoring the unreadable %s entry of the model", key)
        return default
