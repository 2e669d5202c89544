"""What a plan does, for a person to read (`placer show`): which ops it splits and over which
devices, and where its layout changes (the collectives) sit, between which producer and readers.

The collectives are read from the plan's lowered graph (`lower.py`), so they are the very steps
the simulator prices: each layout-change step is named ``<tensor>/<change>/<step>@<device>`` by
`convert.py`, and the change (all-gather, all-reduce, reduce-scatter, all-to-all, cut, gather,
reduce) is that name's middle part.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from placer.graph.opgraph import OpGraph
from placer.plans.layout import REPLICATE, Layout
from placer.plans.lower import lower
from placer.plans.lowered import Lowered
from placer.plans.plan import OpPlan, Plan


@dataclass(frozen=True)
class SplitOp:
    """An op on more than one device, with its layouts (empty: replicated, every one Replicate())."""

    name: str
    op_type: str
    devices: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class LayoutChange:
    """A tensor changed from the layout its producer leaves (None: a graph input or weight) into
    what its `readers` read (none: a graph output), by `changes` over `devices`."""

    tensor: str
    producer: str | None
    readers: tuple[str, ...]
    changes: tuple[str, ...]
    devices: tuple[str, ...]


@dataclass(frozen=True)
class PlanSummary:
    """The split ops, the layout changes, every (producer, reader) edge whose tensor moves (onto
    other devices or into another layout: a copy or a collective), and the lowered plan."""

    split: list[SplitOp]
    changes: list[LayoutChange]
    moves: set[tuple[str, str]]
    lowered: Lowered

    def lines(self) -> list[str]:
        """The split ops and the layout changes, as `placer show` prints them below its rows."""
        out = ["a plan: the rows count each split op's shards and the collectives' steps; peak memory with --cluster",
               f"{len(self.split)} op(s) split across devices:"]
        for op in self.split:
            layouts = f"{' x '.join(op.inputs)} -> {', '.join(op.outputs)}" if op.inputs or op.outputs else "replicated"
            out.append(f"  {op.name} ({op.op_type}) over {', '.join(op.devices)}: {layouts}")
        out.append(f"{len(self.changes)} layout change(s):")
        out.extend(f"  {c.tensor} from {c.producer or 'the graph input'} to {', '.join(c.readers) or 'the graph output'}"
                   f": {' + '.join(c.changes)} on {', '.join(c.devices)}" for c in self.changes)
        return out

    def to_dict(self) -> dict:
        """Plain data, for `placer show --json`."""
        return {"split_ops": [asdict(s) for s in self.split], "layout_changes": [asdict(c) for c in self.changes]}


def summarize_plan(graph: OpGraph, plan: Plan) -> PlanSummary:
    """The split ops of `plan` (checked against `graph` as lowering checks it) and its layout changes."""
    lowered = lower(graph, plan)
    split = [SplitOp(n, graph.nodes[n].op_type, op.devices, tuple(map(str, op.inputs)), tuple(map(str, op.outputs)))
             for n, op in plan.ops.items() if n in graph.nodes and not op.whole]
    kinds: dict[str, dict[str, None]] = {}
    devices: dict[str, dict[str, None]] = {}
    for step in lowered.helpers:
        tensor, kind, _ = step.rsplit("/", 2)
        kinds.setdefault(tensor, {})[kind] = None
        devices.setdefault(tensor, {})[lowered.placement.nodes[step]] = None
    producer = {t: n for n, node in graph.nodes.items() for t in node.outputs if t}
    changes = [LayoutChange(t, producer.get(t), _readers(graph, plan, t, producer.get(t)), tuple(kinds[t]),
                            tuple(devices[t])) for t in kinds]
    moves = {(n, r) for t, n in producer.items() for r in _readers(graph, plan, t, n)}
    return PlanSummary(split, changes, moves, lowered)


def _readers(graph: OpGraph, plan: Plan, tensor: str, producer: str | None) -> tuple[str, ...]:
    """The ops reading `tensor` on other devices or in another layout than its producer leaves."""
    if producer is None:
        return tuple(n for n, node in graph.nodes.items() if tensor in node.inputs)
    node = graph.nodes[producer]
    held = (plan.ops[producer].devices, _layout(plan.ops[producer], node.outputs.index(tensor), "outputs"))
    return tuple(n for n, reader in graph.nodes.items() for i, t in enumerate(reader.inputs)
                 if t == tensor and (plan.ops[n].devices, _layout(plan.ops[n], i, "inputs")) != held)


def _layout(op: OpPlan, position: int, side: str) -> Layout:
    layouts = getattr(op, side)
    return layouts[position] if layouts else REPLICATE
