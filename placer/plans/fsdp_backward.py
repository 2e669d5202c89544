"""FSDP's backward pass: a sharded weight, all-gathered for the forward pass, is freed after it and
all-gathered again for the backward pass, and its gradient is reduce-scattered, so no device holds
the weight whole in between, and each keeps only its slice of the gradient.

In a training program of a lowered plan (`placer.costmodel.sim_program.training_program`) every
backward step keeps its forward inputs alive until it runs (the activations autograd saves), a
gathered weight among them, and the gathered weight's gradient flows back through the forward
gather's ring step by step. Here instead:

- the backward steps read a second gather of the weight's slices, made right before the first of
  them, on the compute stream (FSDP's backward waits for it);
- the forward gather's backward steps (and the sums of what they send) are left out, and the
  gathered weight's gradient, a `Partial()` on each device, is reduce-scattered by NCCL's ring
  (`collectives.reduce_scatter`) on the communication streams, beside the backward steps still to
  run; each device updates its slice from its part once the backward pass is done, every
  reduce-scatter with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from placer.costmodel.sim_program import SimProgram
from placer.graph.opgraph import OpGraph, OpNode
from placer.placement import Placement
from placer.plans import collectives
from placer.plans.layout import parse_layout
from placer.plans.program_steps import StepBuilder, ordered, splice


def with_fsdp_backward(program: SimProgram, graph: OpGraph, placement: Placement, devices: Sequence[str],
                       stored: Mapping[str, str], launch: Callable[[OpNode, str], float]) -> SimProgram:
    """`program` (a training step of the lowered `graph`) with each weight of `stored` (weight ->
    its stored layout) gathered again for its backward readers and its gradient reduce-scattered."""
    steps = program.steps
    made_at = {t: i for i, s in enumerate(steps) for t in s.outputs if t}
    made = StepBuilder.over(program, graph)
    before: dict[int, list[int]] = {}
    after: dict[int, list[int]] = {}
    side: list[int] = []
    renamed: dict[str, str] = {}   # a forward gather on a device -> the backward's gather there
    dropped: set[int] = set()
    grads: dict[str, str] = {}      # a slice's gradient -> its part of the reduce-scatter
    on: dict[str, str] = {}         # a slice's gradient -> its device
    latest: tuple[int, dict[str, str]] = (-1, {})   # the last reduce-scatter to start: its parts by device
    for weight, (ring, pieces, gathered, helpers) in _gathers(graph, placement, stored).items():
        readers = [i for i, s in enumerate(steps) if s.op_type == "backward" and set(s.inputs) & set(gathered)
                   and s.name.removeprefix("backward:") not in helpers]
        if not readers:
            continue
        dim, info = parse_layout(stored[weight]).dim, graph.tensors[gathered[0]]
        first = len(made.steps)
        again = collectives.all_gather(made, ring, pieces, info, dim, f"{weight}/all-gather-again")
        renamed.update(zip(gathered, again))
        before.setdefault(readers[0], []).extend(range(first, len(made.steps)))
        dropped |= _through(steps, {f"backward:{h}" for h in helpers})
        parts = [f"grad:{g}" for g in gathered]
        first = len(made.steps)
        scattered = collectives.reduce_scatter(made, ring, parts, info, dim, f"{weight}/reduce-scatter")
        trigger = max(made_at[p] for p in parts)
        after.setdefault(trigger, []).extend(range(first, len(made.steps)))
        side.extend(range(first, len(made.steps)))
        grads.update((f"grad:{p}", out) for p, out in zip(pieces, scattered))
        on.update((f"grad:{p}", d) for p, d in zip(pieces, ring))
        if trigger >= latest[0]:
            latest = (trigger, dict(zip(ring, scattered)))
    updates = [i for i, s in enumerate(steps) if s.op_type == "update" and s.inputs[1] in grads]
    inputs = {i: tuple(renamed.get(t, t) for t in s.inputs) for i, s in enumerate(steps)
              if s.op_type == "backward" and any(t in renamed for t in s.inputs)}
    # the optimizer steps once the backward pass has returned, every reduce-scatter done
    inputs.update({i: tuple(dict.fromkeys((steps[i].inputs[0], grads[steps[i].inputs[1]], *steps[i].inputs[2:],
                                           latest[1][on[steps[i].inputs[1]]])))
                   for i in updates})
    return splice(program, graph, placement, devices, made, ordered(steps, before, after, updates, dropped),
                  inputs, side, launch)


def _through(steps, names: set[str]) -> set[int]:
    """The steps named `names`, and every step reading what they make but an update (the sums of
    their gradients): the forward gather's backward, which the reduce-scatter replaces."""
    out, made = set(), set()
    for i, s in enumerate(steps):
        if s.name in names or (s.op_type != "update" and made & set(s.inputs)):
            out.add(i)
            made.update(s.outputs)
    return out


def _gathers(graph: OpGraph, placement: Placement,
             stored: Mapping[str, str]) -> dict[str, tuple[list[str], list[str], list[str], set[str]]]:
    """Weight -> its forward gather's devices in ring order, their slices, the gathered copies (the
    `Join` steps of `collectives.all_gather`, named `<weight>/all-gather/...`, each reading its own
    device's slice) and the names of all its steps."""
    found: dict[str, tuple[list[str], list[str], list[str], set[str]]] = {}
    for name, node in graph.nodes.items():
        weight, mark, _ = name.partition("/all-gather/")
        if not mark or weight not in stored:
            continue
        ring, pieces, gathered, helpers = found.setdefault(weight, ([], [], [], set()))
        helpers.add(name)
        if node.op_type == "Join":
            ring.append(placement.nodes[name])
            pieces.extend([t for t in node.inputs if t in graph.initializers][:1])
            gathered.append(node.outputs[0])
    return found
