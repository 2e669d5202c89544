"""Collectives added to a training program (`SimProgram`) after it is built: the ring steps of
`placer.plans.collectives`, written as the program's steps instead of the lowered graph's nodes,
and spliced in among the program's own.

`StepBuilder` is the part of `LoweredBuilder` the ring makers call (`tensor`, `helper`), keeping
steps; `splice` gives the program in a new order with them, each made step on its device (run by a
node placed there), priced as its `HelperCost` says (a launch, or free: its time is its copies).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from placer.costmodel.sim_program import SimProgram
from placer.graph.opgraph import OpGraph, OpNode, TensorInfo
from placer.placement import Placement
from placer.plans.lowered import HelperCost
from placer.program.walk import Step


@dataclass
class StepBuilder:
    """Steps made by the ring makers, with their devices, prices and tensors' bytes; `taken`: the
    names already used (the program's steps and tensors)."""

    taken: set[str]
    steps: list[Step] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    costs: list[HelperCost] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)

    def unique(self, name: str) -> str:
        k, candidate = 1, name
        while candidate in self.taken:
            k, candidate = k + 1, f"{name}#{k}"
        self.taken.add(candidate)
        return candidate

    def tensor(self, name: str, shape: Sequence[int], dtype: str) -> TensorInfo:
        info = TensorInfo(self.unique(name), tuple(int(d) for d in shape), dtype)
        self.sizes[info.name] = info.nbytes
        return info

    def helper(self, op_type: str, device: str, inputs: Sequence[str], outputs: Sequence[TensorInfo],
               cost: HelperCost, base: str, **attrs: int | list[int]) -> list[str]:
        """A collective's step, priced (its `attrs`, which say how a kernel runs it, unused here)."""
        self.steps.append(Step(self.unique(f"{base}/{op_type}@{device}"), op_type, tuple(inputs),
                               tuple(o.name for o in outputs)))
        self.devices.append(device)
        self.costs.append(cost)
        return [o.name for o in outputs]

    @classmethod
    def over(cls, program: SimProgram, graph: OpGraph) -> StepBuilder:
        return cls({t for s in program.steps for t in (s.name, *s.outputs)} | set(graph.tensors))


def ordered(steps: Sequence[Step], before: Mapping[int, Sequence[int]], after: Mapping[int, Sequence[int]],
            last: Collection[int] = (), dropped: Collection[int] = ()) -> list[tuple[bool, int]]:
    """The order `splice` takes: the program's steps with made steps `before` and `after` some,
    the steps `last` (with every step reading what they make) moved to the end, `dropped` left out."""
    made_last = {t for i in last for t in steps[i].outputs}
    moved = set(last) | {i for i, s in enumerate(steps) if made_last & set(s.inputs)}
    order: list[tuple[bool, int]] = []
    for i in range(len(steps)):
        order.extend((True, j) for j in before.get(i, ()))
        if i not in moved and i not in dropped:
            order.append((False, i))
        order.extend((True, j) for j in after.get(i, ()))
    return order + [(False, i) for i in sorted(moved)]


def splice(program: SimProgram, graph: OpGraph, placement: Placement, devices: Sequence[str], made: StepBuilder,
           order: Sequence[tuple[bool, int]], inputs: Mapping[int, tuple[str, ...]], side: Collection[int],
           launch: Callable[[OpNode, str], float]) -> SimProgram:
    """`program` with its steps and `made`'s in `order` (True, i): made step i, (False, i): the
    program's step i, read as `inputs[i]` where given); the made steps of `side` on their devices'
    communication streams. `launch(node, device)`: a collective's kernel launch."""
    anchor: dict[str, int] = {}   # device -> a node placed there, whose device runs the made steps there
    for k, name in enumerate(graph.nodes):
        anchor.setdefault(placement.nodes[name], k)
    nodes = list(graph.nodes.values())
    steps, node_of, times, index, on_side = [], [], [], {}, set()
    for is_made, i in order:
        if is_made:
            d = made.devices[i]
            if i in side:
                on_side.add(len(steps))
            steps.append(made.steps[i])
            node_of.append(anchor[d])
            times.append([0.0] * len(devices) if made.costs[i] is HelperCost.FREE
                         else [float(launch(nodes[anchor[d]], x)) for x in devices])
        else:
            s = program.steps[i]
            index[i] = len(steps)
            steps.append(replace(s, inputs=inputs[i]) if i in inputs else s)
            node_of.append(program.node_of[i])
            times.append(program.times[i])
    on_side |= {index[i] for i in program.side}   # the program's own, renumbered
    size, copied, sizes = program.size, program.copy_size, made.sizes
    return replace(program, steps=steps, node_of=node_of, times=times,
                   size=lambda t: sizes[t] if t in sizes else size(t),
                   copied=lambda t: sizes[t] if t in sizes else copied(t),
                   held=[(nbytes, index[i]) for nbytes, i in program.held], side=frozenset(on_side))
