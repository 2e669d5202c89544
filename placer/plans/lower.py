"""Lowering: a plan as an ordinary `OpGraph` and `Placement`, so that the simulator, its memory
accounting and the placement checks see what they already know, plus collectives.

Walking the source graph in order, each op reads its inputs in the layouts its split wants
(`convert.Converter` adds the layout changes), then becomes:

- on one device, itself (renamed inputs where a layout change feeds it), so a placement's plan
  lowers to the very graph and placement it came from;
- on n devices, one op per device, `<op>@<device>`, with its own sliced tensors (`<tensor>@<device>`)
  and its share of the op's FLOPs (the sharded axis's slice: every split here divides the work
  along one axis), so the cost model prices the shard, not the whole op.

A weight the plan stores in a layout (`extra["placer"]["stored"]`, FSDP's `Shard(0)`, over
`["stored_on"]`, by default the plan's devices) is held so from the start, each device its slice,
and converted for its readers as any tensor (all-gathered).

A graph output is left as its producer leaves it (sharded: each device holds its slice, as data
parallelism leaves a batch), except a `Partial` one, which is all-reduced: its parts are no result.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import onnx

from placer.graph.opgraph import OpGraph, OpNode, TensorInfo
from placer.graph.structure import rename_outer_reads, subgraphs
from placer.plans.check import op_splits
from placer.plans.convert import Converter, Pieces
from placer.plans.layout import PARTIAL, REPLICATE, Shard, parse_layout, piece_shape, shard_sizes
from placer.plans.lowered import Lowered, LoweredBuilder
from placer.plans.plan import Plan
from placer.plans.rules import Split


def lower(graph: OpGraph, plan: Plan, runnable: bool = True) -> Lowered:
    """`plan` (checked against `graph`) as a graph, a placement and its helpers' prices; with
    `runnable` False for pricing alone (`LoweredBuilder.runnable`)."""
    splits = op_splits(graph, plan)
    b = LoweredBuilder(graph, list(plan.devices), runnable)
    convert = Converter(b, graph)
    stored_on = tuple(plan.extra.get("placer", {}).get("stored_on", plan.devices))
    for weight, text in plan.extra.get("placer", {}).get("stored", {}).items():   # FSDP's: held sharded
        held = parse_layout(text, f"the stored layout of {weight}")
        convert.produced(weight, Pieces(stored_on, held, convert.pieces(weight, stored_on, held)))
    for name, node in graph.nodes.items():
        devices, split = plan.ops[name].devices, splits[name]
        inputs = [convert.pieces(t, devices, layout) if t else ("",) * len(devices)
                  for t, layout in zip(node.inputs, split.inputs)]
        outputs = _whole(b, node, devices[0], inputs) if len(devices) == 1 else \
            _shards(b, graph, node, split, devices, inputs)
        for t, names, layout in zip(node.outputs, outputs, split.outputs):
            if t:
                convert.produced(t, Pieces(devices, layout, names))
    results = {}
    for out in graph.outputs:
        held = convert.held.get(out.name)
        layout = REPLICATE if held is None or held.layout == PARTIAL else held.layout
        devices = held.devices if held is not None else (plan.devices[0],)
        results[out.name] = (layout, convert.pieces(out.name, devices, layout))
    digest = hashlib.sha256(json.dumps(plan.to_dict()["ops"], sort_keys=True).encode()).hexdigest()
    return b.build(results, digest)


def _whole(b: LoweredBuilder, node: OpNode, device: str, inputs: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The op itself on `device` (renamed inputs only where a layout change feeds it); its outputs."""
    read = tuple(p[0] for p in inputs)
    b.add(node if read == node.inputs else renamed(node, node.name, read, node.outputs, runnable=b.runnable), device)
    return [(t,) for t in node.outputs]


def _shards(b: LoweredBuilder, graph: OpGraph, node: OpNode, split: Split, devices: tuple[str, ...],
            inputs: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """One op per device, `<op>@<device>`, with its sliced outputs, the weights it reads and its
    share of the FLOPs; each output's names per device."""
    n = len(devices)
    outputs = [tuple(b.unique(f"{t}@{d}") if t else "" for d in devices) for t in node.outputs]
    for k, device in enumerate(devices):
        read, name = tuple(p[k] for p in inputs), b.unique(f"{node.name}@{device}")
        b.shard_of[name] = node.name
        infos = tuple(TensorInfo(names[k], piece_shape(graph.tensors[t].shape, layout, k, n), graph.tensors[t].dtype)
                      for t, names, layout in zip(node.outputs, outputs, split.outputs) if t)
        b.add(renamed(node, name, read, tuple(names[k] for names in outputs), runnable=b.runnable,
                       output_info=infos, param_bytes=b.param_bytes(read),
                       flops=node.flops * _share(graph, node, split, k, n)), device)
    return outputs


def _share(graph: OpGraph, node: OpNode, split: Split, k: int, n: int) -> float:
    """Device k's share of the op's work: its slice of the first sharded output (or input) over
    the whole of it; all of it where nothing is sharded (a replicated op)."""
    for names, layouts in ((node.outputs, split.outputs), (node.inputs, split.inputs)):
        for t, layout in zip(names, layouts):
            if t and isinstance(layout, Shard):
                length = graph.tensors[t].shape[layout.dim]
                return shard_sizes(length, n, layout.parts)[k] / length
    return 1.0


def renamed(node: OpNode, name: str, inputs: tuple[str, ...], outputs: tuple[str, ...], runnable: bool = True,
            **changes) -> OpNode:
    """`node` as `name`, reading `inputs` (its implicit ones last, as `OpNode.inputs` lists them)
    and writing `outputs`, with `changes` to its other fields; its proto renamed alike, what a
    control-flow body reads from outside it too (its own names kept); none where not `runnable`."""
    implicit = inputs[len(inputs) - len(node.implicit_inputs):] if node.implicit_inputs else ()
    if not runnable:
        return replace(node, name=name, inputs=inputs, outputs=outputs, proto=None, implicit_inputs=implicit,
                       **changes)
    proto = onnx.NodeProto()
    proto.CopyFrom(node.proto)
    proto.name = name
    del proto.input[:]
    proto.input.extend(inputs[:len(node.proto.input)])
    del proto.output[:]
    proto.output.extend(outputs)
    moved = {old: new for old, new in zip(node.inputs, inputs) if old and old != new}
    if moved and (node.implicit_inputs or subgraphs(proto)):
        rename_outer_reads(proto, moved)
    return replace(node, name=name, inputs=inputs, outputs=outputs, proto=proto, implicit_inputs=implicit, **changes)
