"""The one check of a plan against its graph: every node planned, and each op's layouts a split its
maths allows (`placer.plans.rules`), or whole on one device, or replicated.

    op_splits(graph, plan) -> {node: Split} for every node of `graph`, in graph order
"""

from __future__ import annotations

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.graph.placement_check import LISTS_NODE_NAMES
from placer.plans.layout import REPLICATE, Shard, shard_sizes
from placer.plans.plan import OpPlan, Plan
from placer.plans.rules import Split, replicated, splits


def op_splits(graph: OpGraph, plan: Plan) -> dict[str, Split]:
    """Each node's split under `plan`; a node left out or layouts the op does not allow are a
    `PlacerError` that says what is allowed."""
    missing = [n for n in graph.nodes if n not in plan.ops]
    if missing:
        raise PlacerError(f"the plan does not plan {len(missing)} node(s) of the graph, e.g. {missing[:3]}; "
                          f"{LISTS_NODE_NAMES}")
    return {name: _split_of(graph, name, plan.ops[name]) for name in graph.nodes}


def _split_of(graph: OpGraph, name: str, op: OpPlan) -> Split:
    node = graph.nodes[name]
    whole = replicated(node)
    if not op.inputs and not op.outputs:
        return whole
    if (len(op.inputs), len(op.outputs)) != (len(node.inputs), len(node.outputs)):
        raise PlacerError(f"op {name} ({node.op_type}) has {len(node.inputs)} input(s) and {len(node.outputs)} "
                          f"output(s), and the plan gives {len(op.inputs)} and {len(op.outputs)} layouts; give one "
                          "per input and output, or none for a whole or replicated op")
    layouts = (op.inputs, op.outputs)
    if op.whole:
        if any(x != REPLICATE for x in op.inputs + op.outputs):
            raise PlacerError(f"op {name} is on one device ({op.devices[0]}), where it is whole; give its layouts "
                              "as Replicate(), or none")
        return whole
    parts = next((x.parts for x in op.inputs + op.outputs if isinstance(x, Shard) and x.parts), None)
    allowed = [whole] + splits(node, graph, len(op.devices), parts)
    even = tuple(tuple(x.even if isinstance(x, Shard) else x for x in side) for side in layouts)
    for split in allowed:
        if (split.inputs, split.outputs) == even:
            _check_parts(graph, name, node, op)
            return Split(split.name, op.inputs, op.outputs)
    described = "; ".join(f"{s.name}: {_arrow(s.inputs, s.outputs)}" for s in allowed)
    raise PlacerError(f"op {name} ({node.op_type}): {_arrow(*layouts)} is not a split its maths allows; "
                      f"it allows {described}")


def _check_parts(graph: OpGraph, name: str, node, op: OpPlan) -> None:
    """An uneven split cuts every sharded tensor of the op by the same parts into slices of one
    proportion (along axes of one length, or of lengths a whole multiple of each other, as a
    reshape merges the batch with the steps after it: then device k's rows of one are the runs of
    its rows of the other), so that device k's slices are the same samples of each (else the
    split is unsound)."""
    cut = [(graph.tensors[t].shape[x.dim], x.parts) for t, x in zip(node.inputs + node.outputs, op.inputs + op.outputs)
           if t and isinstance(x, Shard)]
    if not any(parts is not None for _, parts in cut) or len(set(cut)) < 2:
        return
    n = len(op.devices)
    shortest = min(length for length, _ in cut)
    base = shard_sizes(shortest, n, cut[0][1])
    alike = all(parts == cut[0][1] and length % shortest == 0
                and shard_sizes(length, n, parts) == [size * (length // shortest) for size in base]
                for length, parts in cut)
    if not alike:
        raise PlacerError(f"op {name} ({node.op_type}) cuts its tensors unevenly but not alike "
                          f"({_arrow(op.inputs, op.outputs)}); give every sharded input and output the same parts, "
                          "along axes whose lengths are whole multiples of each other")


def _arrow(inputs, outputs) -> str:
    return f"{' x '.join(map(str, inputs))} -> {', '.join(map(str, outputs))}"
