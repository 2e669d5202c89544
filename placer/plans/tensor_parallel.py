"""Megatron-LM's tensor-parallel plan (Shoeybi et al. 2019) of a graph's MLP and attention blocks,
found structurally: a block ends in a *row* linear (a MatMul reading a 2-D weight, split on its
reduced axis, `Shard(-1) x Shard(0) -> Partial`, then all-reduced), and what feeds it is walked
back, each op taking the split that leaves its output as its reader wants it (element-wise ops
follow, attention's core splits its heads, the reshapes map hidden to heads), up to the block's
*column* linears (`Replicate x Shard(1) -> Shard(-1)`): the MLP's first layer, the attention's
QKV projection. A block is one whose walk reaches a column linear; every other op (layer norms,
residuals, embeddings) is computed whole on every device, as Megatron does, but for the last
linear layer outside the blocks (a language model's head), split by columns and all-gathered.

A fused QKV projection cut by an ONNX `Split` (GPT-2's c_attn) is split by columns too, but
contiguous columns do not hold whole heads of q, k and v: Megatron stores that weight reordered
per device, which a plan over the given weights cannot, so its output is all-gathered before the
`Split` (each device then cuts its heads for free), and the plan notes it.
"""

from __future__ import annotations

from collections.abc import Sequence

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph, OpNode
from placer.plans.layout import Layout, Shard
from placer.plans.plan import OpPlan, Plan
from placer.plans.rules import Split, replicated, splits

NAME = "tensor_parallel"


def tensor_parallel(graph: OpGraph, devices: Sequence[str]) -> Plan:
    """Megatron's plan of `graph` over `devices` (two or more); a graph with no MLP or attention
    block (a CNN) is a PlacerError."""
    devices = tuple(devices)
    if len(devices) < 2:
        raise PlacerError(f"tensor parallelism splits layers over two devices or more, and there is "
                          f"{len(devices)}: {', '.join(devices) or 'none'}")
    n = len(devices)
    options = _Splits(graph, n)
    chosen: dict[str, Split] = {}
    blocks, gathered = 0, []
    for name, node in reversed(graph.nodes.items()):
        if name in chosen or not _is_linear(graph, node):
            continue
        row = options.named(node, "reduced axis")
        if row is None:
            continue
        region = _walk_back(graph, node, row, options)
        if region is None:
            continue
        chosen.update(region.splits)
        gathered += region.gathered
        blocks += 1
    head = _head(graph, chosen, options)
    if blocks and head is not None:
        chosen[head.name] = options.named(head, "columns")
    if not blocks:
        raise PlacerError(f"tensor parallelism splits MLP and attention blocks (a linear layer, element-wise ops "
                          f"or an attention core, a second linear layer), and {graph.source or 'the graph'} has "
                          f"none that splits over {n} devices")
    ops = {name: OpPlan(devices, *_layouts(chosen.get(name) or replicated(node))) for name, node in graph.nodes.items()}
    return Plan(list(devices), ops, graph.sha256,
                extra={"placer": {"name": NAME, "blocks": blocks, "gathered": gathered,
                                  "head": head.name if head is not None else None}})


def _head(graph: OpGraph, chosen: dict[str, Split], options: _Splits) -> OpNode | None:
    """The last linear layer, where no block holds it (a language model's head over the vocabulary):
    split by columns as Megatron's is, its output all-gathered for whatever reads it."""
    last = next((node for node in reversed(graph.nodes.values()) if _is_linear(graph, node)), None)
    if last is None or last.name in chosen or options.named(last, "columns") is None:
        return None
    return last


def _layouts(split: Split) -> tuple[tuple[Layout, ...], tuple[Layout, ...]]:
    return split.inputs, split.outputs


def _is_linear(graph: OpGraph, node: OpNode) -> bool:
    """A MatMul or Gemm whose second operand is a 2-D weight."""
    return (node.op_type in ("MatMul", "Gemm") and len(node.inputs) > 1 and node.inputs[1] in graph.initializers
            and len(graph.tensors[node.inputs[1]].shape) == 2)


class _Splits:
    """Each node's splits over `n` devices, worked out once: the walks back from each block pass the
    same nodes again and again (a residual stream leads back to the embedding)."""

    def __init__(self, graph: OpGraph, n: int) -> None:
        self.graph, self.n = graph, n
        self._of: dict[str, list[Split]] = {}

    def of(self, node: OpNode) -> list[Split]:
        if node.name not in self._of:
            self._of[node.name] = splits(node, self.graph, self.n)
        return self._of[node.name]

    def named(self, node: OpNode, name: str) -> Split | None:
        return next((s for s in self.of(node) if s.name == name), None)


class _Region:
    def __init__(self) -> None:
        self.splits: dict[str, Split] = {}
        self.gathered: list[str] = []
        self.columns = 0


def _walk_back(graph: OpGraph, row: OpNode, row_split: Split, options: _Splits) -> _Region | None:
    """The block ending in `row`: each producer of a tensor the block reads sharded takes the split
    that leaves it so, back to the column linears; None where the walk reaches none."""
    region = _Region()
    region.splits[row.name] = row_split
    wanted: dict[str, Layout] = {}
    _want(graph, row, row_split, wanted)
    order = list(graph.nodes)
    for name in reversed(order[:order.index(row.name)]):
        node = graph.nodes[name]
        if wanted.keys().isdisjoint(node.outputs):   # most nodes: a set test, not a list (a walk can be long)
            continue
        outs = [wanted.get(t) for t in node.outputs if t]
        if not any(outs):
            continue
        want = next(x for x in outs if x)
        if _is_linear(graph, node):
            split = options.named(node, "columns")
            if split is None or split.outputs[0] != want:
                return None
            region.splits[name] = split
            region.columns += 1
            continue
        split = next((s for s in options.of(node)
                      if all(w is None or w == o for w, o in zip(outs, s.outputs))), None)
        if split is None and node.op_type == "Split" and isinstance(want, Shard):
            # a fused projection cut along the sharded axis: gathered whole before the Split
            region.gathered.append(name)
            wanted[node.inputs[0]] = want
            continue
        if split is None:
            return None
        region.splits[name] = split
        _want(graph, node, split, wanted)
    return region if region.columns else None


def _want(graph: OpGraph, node: OpNode, split: Split, wanted: dict[str, Layout]) -> None:
    """Ask the producers of the node's computed inputs for the sharded layouts its split reads."""
    for t, x in zip(node.inputs, split.inputs):
        if t and t in graph.producer and isinstance(x, Shard):
            wanted.setdefault(t, x)


def describe(plan: Plan) -> str:
    """The plan in a line, for its row in a comparison."""
    info = plan.extra["placer"]
    gathered = info["gathered"]
    return (f"a plan, not a placement: Megatron's split of {info['blocks']} MLP/attention block(s) over "
            f"{', '.join(plan.devices)} (first linear by columns, second by rows, then all-reduced), other ops whole "
            "on each" + (f"; the head {info['head']} by columns" if info["head"] else "")
            + (f"; {len(gathered)} fused QKV output(s) all-gathered before their Split" if gathered else ""))
