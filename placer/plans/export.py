"""Write a plan into an ONNX model, as `placer apply` writes a placement (`placer.annotate.write`),
with each split op's tensors in IR-11 sharding specs (`placer.plans.specs`).

A plan that splits no op is its placement, and is written exactly as that placement is. Otherwise
the model is annotated as the placement that puts each op on its first device, then every split
op's annotations are made the plan's:

- its `NodeDeviceConfigurationProto` holds a spec per tensor over the op's devices (`specs.py`),
  and the `placer.layout` note where the specs cannot say the layouts (a `Partial()`);
- it has no ``placer.device`` and no ONNX Runtime layer annotation: no one device runs it, and
  ONNX Runtime cannot split an op;
- no node has a pipeline stage: stages cut a placement per device, and a split op is on several.

The model's ``placer.placement.format`` is then ``placer.plan/1``, and the plan's other fields
(its name, ...) are kept as JSON in ``placer.plan.extra``.
"""

from __future__ import annotations

import json

import onnx

from placer.annotate.keys import CONFIG_NAME, DEVICE_KEY, FORMAT_KEY, LAYER_KEY, LAYOUT_KEY, PLAN_EXTRA_KEY
from placer.annotate.write import apply_placement, del_meta, set_meta
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.graph.placement_check import LISTS_NODE_NAMES
from placer.placement import Placement
from placer.plans.check import op_splits
from placer.plans.plan import FORMAT, Plan
from placer.plans.specs import to_specs


def checked_plan(graph: OpGraph, plan: Plan) -> Plan:
    """`plan` checked against `graph` (its hash, its node names, each op's split, `check.op_splits`),
    its ops in graph order; a Constant weight the file names is dropped, as it goes with its reader."""
    if not graph.is_named_by(plan.graph_sha256):
        raise PlacerError(f"the plan was made for another graph (sha256 {plan.graph_sha256[:12]}…, "
                          f"{graph.source or 'this graph'} has {graph.sha256[:12]}…); make one for this graph, "
                          "or use the model file it was made for")
    unknown = [n for n in plan.ops if n not in graph.nodes and n not in graph.constants]
    if unknown:
        raise PlacerError(f"the plan names {len(unknown)} node(s) that {graph.source or 'the graph'} does not "
                          f"have, e.g. {unknown[:3]}; {LISTS_NODE_NAMES}")
    op_splits(graph, plan)
    return Plan(list(plan.devices), {n: plan.ops[n] for n in graph.nodes}, graph.sha256 or plan.graph_sha256,
                plan.measurement, dict(plan.extra))


def apply_plan(model: onnx.ModelProto, plan: Plan, graph: OpGraph) -> onnx.ModelProto:
    """A copy of `model` with `plan` written into it (see the module doc); the input is untouched.
    `graph` is the `OpGraph` loaded from `model`."""
    plan = checked_plan(graph, plan)
    if plan.is_placement:
        return apply_placement(model, plan.to_placement(), graph)
    first = Placement(list(plan.devices), {n: op.devices[0] for n, op in plan.ops.items()}, plan.graph_sha256,
                      plan.measurement)
    out = apply_placement(model, first, graph)   # names, device list, inlined functions, model metadata
    index = {d: i for i, d in enumerate(plan.devices)}
    for node in out.graph.node:
        config = next(c for c in node.device_configurations if c.configuration_id == CONFIG_NAME)
        config.ClearField("pipeline_stage")
        op = plan.ops.get(node.name)   # None: a Constant weight, whole on its reader's first device
        if op is None or op.whole:
            continue
        specs, note = to_specs(op, list(node.input), list(node.output), index)
        del config.sharding_spec[:]
        config.sharding_spec.extend(specs)
        del_meta(node.metadata_props, DEVICE_KEY)
        del_meta(node.metadata_props, LAYER_KEY)
        if note is not None:
            set_meta(node.metadata_props, LAYOUT_KEY, note)
    set_meta(out.metadata_props, FORMAT_KEY, FORMAT)
    if plan.extra:
        set_meta(out.metadata_props, PLAN_EXTRA_KEY, json.dumps(plan.extra, sort_keys=True))
    return out
