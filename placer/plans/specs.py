"""One op's plan as ONNX IR-11 sharding specs (`ShardingSpecProto`), and back.

A spec names one tensor the node reads or writes and the devices (indices into the model's
device list) that hold it:

- `Shard(d)` over n devices: ``device = [i0, ..., in-1]`` and one ``sharded_dim`` with ``axis = d``
  and ``simple_sharding = [{num_shards: n}]``: device k holds the k-th slice;
- `Replicate()` over n devices: one device group, ``device = [GROUP]`` with
  ``index_to_device_group_map = {GROUP: [i0, ..., in-1]}``: the whole tensor on each of them, as
  ONNX's sharding formalism writes a replicated shard;
- a whole op (one device): ``device = [i]``, as `placer apply` writes a placement.

ONNX has no word for `Partial()` (each device holds a full-sized part of a sum). Its spec says what
an ONNX reader may rightly do with it, `Replicate()` over the op's devices (the parts summed
everywhere: correct, if eager), and the node's `LAYOUT_KEY` metadata holds the op's layouts, so
placer reads the sum as deferred. The same note is written wherever the specs alone would not read
back to the plan (a tensor read twice in two layouts, an implicit input of a control-flow op).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import onnx

from placer.annotate.keys import LAYOUT_KEY
from placer.errors import PlacerError
from placer.plans.layout import PARTIAL, REPLICATE, Layout, Shard, parse_layout
from placer.plans.plan import OpPlan

# The key of the device group a replicated tensor names (negative, as in ONNX's sharding formalism,
# so it is never read as a device index).
GROUP = -1


def canonical(op: OpPlan) -> OpPlan:
    """`op` in the one form a file reads back as: no layouts where every one is `Replicate()`
    (which `OpPlan` means by none)."""
    if all(x == REPLICATE for x in op.inputs + op.outputs):
        return OpPlan(op.devices)
    return op


def to_specs(op: OpPlan, inputs: Sequence[str], outputs: Sequence[str],
             index: dict[str, int]) -> tuple[list[onnx.ShardingSpecProto], str | None]:
    """The specs of a node reading `inputs` and writing `outputs` (its proto's lists) under `op`,
    one per distinct tensor, and the `LAYOUT_KEY` note it needs (None: the specs say it all)."""
    op = canonical(op)
    ids = [index[d] for d in op.devices]
    specs: dict[str, onnx.ShardingSpecProto] = {}
    for tensor, layout in _positions(op, inputs, outputs):
        if tensor and tensor not in specs:
            specs[tensor] = _spec(tensor, layout, ids)
    back = from_specs(list(specs.values()), inputs, outputs, {i: d for d, i in index.items()}, None, "")
    note = None if back == op else json.dumps({"inputs": [str(x) for x in op.inputs],
                                                "outputs": [str(x) for x in op.outputs]})
    return list(specs.values()), note


def from_specs(specs: Sequence[onnx.ShardingSpecProto], inputs: Sequence[str], outputs: Sequence[str],
               devices: dict[int, str], note: str | None, node: str) -> OpPlan:
    """The `OpPlan` of a node from its specs (`devices`: index -> device) and its `LAYOUT_KEY`
    note; specs placer cannot read as one op's plan are a `PlacerError` naming `node`."""
    by_tensor = {s.tensor_name: s for s in specs}
    read = {t: _read(s, devices, node) for t, s in by_tensor.items()}
    sets = {tuple(ds) for ds, _ in read.values()}
    if len({frozenset(s) for s in sets}) != 1:
        raise PlacerError(f"node {node}'s sharding specs put its tensors on different device sets "
                          f"({sorted(sets)}); a plan gives each op one set: re-run placer apply")
    op_devices = next(iter(read.values()))[0] if read else ()
    if len(op_devices) == 1:
        return OpPlan(op_devices)
    layouts = {t: layout for t, (_, layout) in read.items()}
    if note is None:
        ins = tuple(layouts.get(t, REPLICATE) for t in inputs)
        outs = tuple(layouts.get(t, REPLICATE) for t in outputs)
        return canonical(OpPlan(op_devices, ins, outs))
    op = _noted(note, node, op_devices)
    first = {}   # a tensor's spec is written from its first position (a second may differ: hence the note)
    for tensor, layout in _positions(op, inputs, outputs):
        first.setdefault(tensor, layout)
    for tensor, layout in first.items():
        told = layouts.get(tensor, layout)
        if tensor and told != layout and not (layout == PARTIAL and told == REPLICATE):
            raise PlacerError(f"node {node}: its {LAYOUT_KEY} note says {tensor} is {layout}, and its sharding "
                              f"spec says {told}; one was edited after placer apply wrote them: re-run placer apply")
    return canonical(op)


def _positions(op: OpPlan, inputs: Sequence[str], outputs: Sequence[str]):
    """(tensor, layout) of each input and output the node's proto lists; an op without layouts
    has every one `Replicate()`."""
    ins = op.inputs or (REPLICATE,) * len(inputs)
    outs = op.outputs or (REPLICATE,) * len(outputs)
    return list(zip(inputs, ins)) + list(zip(outputs, outs))


def _spec(tensor: str, layout: Layout, ids: list[int]) -> onnx.ShardingSpecProto:
    spec = onnx.ShardingSpecProto(tensor_name=tensor)
    if len(ids) == 1:
        spec.device.append(ids[0])
    elif isinstance(layout, Shard):
        spec.device.extend(ids)
        spec.sharded_dim.add(axis=layout.dim).simple_sharding.add(num_shards=len(ids))
    else:   # Replicate, and Partial as the nearest thing ONNX can say (see the module doc)
        spec.device.append(GROUP)
        spec.index_to_device_group_map.add(key=GROUP, value=ids)
    return spec


def _read(spec: onnx.ShardingSpecProto, devices: dict[int, str], node: str) -> tuple[tuple[str, ...], Layout]:
    """One spec as (its devices, in order, and the layout it gives)."""
    groups = {e.key: list(e.value) for e in spec.index_to_device_group_map}
    where = f"node {node}'s sharding spec of {spec.tensor_name}"
    if len(spec.device) == 1 and not spec.sharded_dim:
        ids = groups.get(spec.device[0], [spec.device[0]])
        layout: Layout = REPLICATE
    elif not groups and len(spec.sharded_dim) == 1 and len(spec.sharded_dim[0].simple_sharding) == 1:
        dim = spec.sharded_dim[0]
        ids, layout = list(spec.device), Shard(dim.axis)
        if dim.axis < 0 or dim.simple_sharding[0].num_shards != len(ids):
            raise PlacerError(f"{where} cuts axis {dim.axis} into {dim.simple_sharding[0].num_shards} shards over "
                              f"{len(ids)} devices; placer reads one slice per device of a non-negative axis")
    else:
        raise PlacerError(f"{where} is not one placer writes (one axis split over all the op's devices, or the "
                          "tensor whole on each); placer cannot read it as a plan")
    unknown = [i for i in ids if i not in devices]
    if unknown or len(set(ids)) != len(ids):
        raise PlacerError(f"{where} names device indices {ids}, and the model lists {len(devices)} devices; "
                          "re-run placer apply")
    return tuple(devices[i] for i in ids), layout


def _noted(note: str, node: str, devices: tuple[str, ...]) -> OpPlan:
    try:
        data = json.loads(note)
        return OpPlan(devices, *(tuple(parse_layout(x, f"node {node}'s {LAYOUT_KEY}") for x in data[key])
                                 for key in ("inputs", "outputs")))
    except (json.JSONDecodeError, KeyError, TypeError):
        raise PlacerError(f"node {node}'s {LAYOUT_KEY} note {note!r} is not "
                          '{"inputs": [...], "outputs": [...]}; re-run placer apply') from None
