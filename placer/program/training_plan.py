"""The steps a training step appends to the forward pass: loss, backward and update steps.

Every step is a `walk.Step` with a device, so `build_schedule` splits them by device, derives
the crossings (gradients flow back over the forward edges), the frees and the memory as it does
for the forward pass. Names:

- ``saved:<node>``: a forward step on a gradient path also returns its autograd record (the
  inputs it differentiates by and the outputs it made, with the graph torch saved between
  them); the node's backward step is its last reader, so the saved activations are freed then.
- ``grad:<tensor>``: the gradient of a tensor. A tensor read by several nodes gets one
  contribution per reader (``grad:<tensor>@<node>``), added to a running sum as each arrives
  (``accumulate:<tensor>@<node>`` steps, ``grad:<tensor>@sum:<node>`` partial sums), the last
  ``accumulate:<tensor>`` on the tensor's device giving ``grad:<tensor>`` before its producer's
  backward step (or its parameter's update).
- ``loss:<output>``: an output's loss term, computed on the output's device (step
  ``loss:<output>``, which also gives the output's gradient); an output no step makes (a
  parameter, an input) on its first gradient reader's device, else on the first node's.
- ``updated:<param>``: a parameter after the optimizer's step (``update:<param>``), on the
  device of the parameter's last contributor (a backward step, or the loss step of a parameter
  that is an output and has no other reader), which holds its optimizer state.
- ``refresh:<param>@<device>``: every other device that reads the parameter holds a copy of it;
  after the update the new value is sent there (``updated:<param>`` crosses from the owner) and
  copied into that copy, so the next step reads the weights the update made, and the step pays
  for sending them. ``updated:<param>`` is the owner's live parameter (no new bytes there); a copy
  received elsewhere takes the parameter's bytes (`copied_as`).

The plan is plain data: the simulator walks its steps, and the torch engine makes each step's
callable from the facts the plan keeps for it (`placer.engines.torch.backward.step_functions`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from placer.graph.opgraph import OpGraph
from placer.program.training import TrainingSpec, check_differentiable, gradient_tensors, trained_parameters
from placer.program.walk import Step


@dataclass
class TrainingPlan:
    """A graph's training step under one assignment: every step in a valid order, its device,
    and what an engine needs to make each step's callable (an update's is made once the
    parameters are on their devices)."""

    steps: list[Step]
    assignment: dict[str, str]                  # step name -> device
    trained: list[str]                          # parameter names, in the file's order
    owner: dict[str, str]                       # parameter -> device holding its update and state
    loss_terms: list[str]                       # tensor names of the loss terms
    outputs: list[str] = field(default_factory=list)   # loss terms, grad:<p>, updated:<p>
    gradient_of: dict[str, str] = field(default_factory=dict)  # grad:<t>[@<node>] -> t
    # What each step's callable does, by the step's name in one micro-batch's program (a
    # pipelined plan's micro-batch steps run their per-micro-batch step's callable):
    # forward step with a record -> for each input it differentiates by (a leaf of its record),
    # the input positions that read it
    leaves: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)
    # loss step -> (its output, whether it also gives the output's gradient)
    losses: dict[str, tuple[str, bool]] = field(default_factory=dict)
    # backward step -> (its node, the positions among the node's outputs of the gradients it reads)
    backwards: dict[str, tuple[str, list[int]]] = field(default_factory=dict)
    # accumulate step -> whether it adds into its partial sum in place (else a fresh sum)
    accumulates: dict[str, bool] = field(default_factory=dict)

    def state_bytes(self, spec: TrainingSpec, size: Callable[[str], int]) -> dict[str, int]:
        """Device -> bytes of the optimizer state it holds for the parameters it updates."""
        held: dict[str, int] = {}
        for p, device in self.owner.items():
            held[device] = held.get(device, 0) + spec.optimizer.state_bytes(size(p))
        return held


def plan_training(graph: OpGraph, assignment: dict[str, str], forward: Sequence[Step], spec: TrainingSpec,
                  host_inputs: Callable[[str], frozenset[int]]) -> TrainingPlan:
    """The training step of `forward` (the placed forward steps) with `spec`'s loss and optimizer.

    `host_inputs(node)`: the input positions the node's kernel reads on the host, which carry no
    gradient (`placer.kernels.registry.host_read_inputs`)."""
    # the outputs the loss has terms for: every gradient, so every trained parameter, starts there
    loss_outputs = spec.loss.outputs(graph, spec.targets)
    trained = trained_parameters(graph, host_inputs, loss_outputs)
    reached = gradient_tensors(graph, host_inputs, loss_outputs)
    needs = set(trained)   # tensors a gradient must be computed for: reached and made from a parameter
    for step in forward:
        positions = host_inputs(step.name)
        if any(t in needs for i, t in enumerate(step.inputs) if i not in positions):
            needs.update(t for t in step.outputs if t in reached)

    def diff_inputs(step: Step) -> list[str]:
        positions = host_inputs(step.name)
        return list(dict.fromkeys(t for i, t in enumerate(step.inputs) if t in needs and i not in positions))

    grad_steps = [s for s in forward if any(t in needs for t in s.outputs)]
    check_differentiable(graph, [s.name for s in grad_steps])
    readers: dict[str, list[str]] = {}   # tensor -> the steps contributing to its gradient
    for o in loss_outputs:
        if o in needs:
            readers.setdefault(o, []).append(f"loss:{o}")
    for s in grad_steps:
        for t in diff_inputs(s):
            readers.setdefault(t, []).append(s.name)

    gradient_of: dict[str, str] = {}

    def contribution(t: str, by: str) -> str:
        name = f"grad:{t}" if len(readers[t]) == 1 else f"grad:{t}@{by}"
        gradient_of[name] = gradient_of[f"grad:{t}"] = t
        return name

    home = {t: assignment[s.name] for s in forward for t in s.outputs if t}

    def home_of(t: str) -> str:
        """The device of `t`'s loss term and gradient sum: its producer's. A tensor no step makes
        (a parameter, an input or a folded constant that is also an output): its first gradient
        reader's, where its update runs too, else the first node's (a node's device, so that the
        simulator, which places each step with a node, places it too)."""
        if t in home:
            return home[t]
        first = next((r for r in readers.get(t, ()) if r in assignment), None)
        return assignment[first] if first is not None else next(iter(assignment.values()))
    steps = [forward_step_with_record(s) if any(t in needs for t in s.outputs) else s for s in forward]
    where = dict(assignment)
    # each input the step differentiates by is one leaf, wherever the step reads it
    leaves = {s.name: [tuple(i for i, t in enumerate(s.inputs) if t == d) for d in diff_inputs(s)]
              for s in grad_steps}
    losses: dict[str, tuple[str, bool]] = {}
    loss_terms = []
    for o in loss_outputs:
        name = f"loss:{o}"
        grads = (contribution(o, name),) if o in needs else ()
        steps.append(Step(name, "loss", (o,), (f"loss_term:{o}", *grads)))
        where[name] = home_of(o)
        losses[name] = (o, bool(grads))
        loss_terms.append(f"loss_term:{o}")

    # A tensor's contributions are summed as they arrive (the loss's first, then the backward
    # steps in reverse order), into a running sum on the device that uses the total: the
    # producer's (a parameter: its owner's, the device of its last contributor). Summing them all
    # at the end kept every contribution alive until then: rnnlm's decoder weight, 20 readers,
    # held 20 fresh 20 MB gradients a step, each paid for in page faults.
    running: dict[str, tuple[str, int]] = {}   # tensor -> (its partial sum's name, contributions in it)
    accumulates: dict[str, bool] = {}

    def arrive(t: str, by: str) -> None:
        """Add reader `by`'s contribution to `t`'s running sum: ``accumulate:<t>`` makes the total
        ``grad:<t>``, the partial sums before it are ``accumulate:<t>@<by>``."""
        if len(readers[t]) == 1:
            return
        mine = contribution(t, by)
        if t not in running:
            running[t] = (mine, 1)
            return
        partial, n = running[t]
        done = n + 1 == len(readers[t])
        name, total = (f"accumulate:{t}", f"grad:{t}") if done else (f"accumulate:{t}@{by}", f"grad:{t}@sum:{by}")
        gradient_of[total] = t
        steps.append(Step(name, "accumulate", (partial, mine), (total,)))
        where[name] = home_of(t)
        # the first sum is a fresh tensor: a contribution may alias another tensor (an Add's
        # backward hands the same gradient to both its inputs); the later ones add into it,
        # which an earlier accumulate step made and only this one reads
        accumulates[name] = n > 1
        running[t] = (total, n + 1)

    pending = {p: len(readers[p]) for p in trained}
    owner: dict[str, str] = {}

    def contributed(p: str, device: str) -> None:
        """One more of parameter `p`'s gradient contributions is in, made on `device`; after the
        last, p's update, on that device (where its gradient sum is)."""
        pending[p] -= 1
        if pending[p] == 0:
            owner[p] = where[f"update:{p}"] = device
            steps.append(Step(f"update:{p}", "update", (p, f"grad:{p}"), (f"updated:{p}",)))

    for o in loss_outputs:
        if o in needs:
            arrive(o, f"loss:{o}")
        if o in pending:   # a parameter that is an output: its loss term contributes too
            contributed(o, where[f"loss:{o}"])
    backwards: dict[str, tuple[str, list[int]]] = {}
    for s in reversed(grad_steps):
        diffs = diff_inputs(s)
        name = f"backward:{s.name}"
        outs = [t for t in s.outputs if t in needs]
        # the step also reads the node's inputs and outputs: the activations its record keeps
        # alive (torch saves a subset of them) stay accounted until it has run
        kept = tuple(dict.fromkeys(t for t in (*s.inputs, *s.outputs) if t))
        steps.append(Step(name, "backward", (f"saved:{s.name}", *(f"grad:{t}" for t in outs), *kept),
                          tuple(contribution(t, s.name) for t in diffs)))
        where[name] = assignment[s.name]
        backwards[name] = (s.name, [s.outputs.index(t) for t in outs])
        for t in diffs:
            arrive(t, s.name)
        for p in diffs:
            if p in pending:
                contributed(p, assignment[s.name])
    steps += refresh_steps(steps, where, owner, trained)
    outputs = loss_terms + [f"grad:{p}" for p in trained] + [f"updated:{p}" for p in trained]
    return TrainingPlan(steps, where, trained, owner, loss_terms, outputs, gradient_of,
                        leaves, losses, backwards, accumulates)


def refresh_steps(steps: Sequence[Step], where: dict[str, str], owner: dict[str, str],
                  trained: Sequence[str]) -> list[Step]:
    """One ``refresh:<p>@<device>`` per trained parameter and device other than its owner that
    has a step reading it, placed there (`where` gets them): it reads the updated value (a copy
    from the owner) and the device's own copy, which it overwrites in place."""
    devices: dict[str, dict[str, None]] = {}   # parameter -> the devices reading it, in step order
    for s in steps:
        for t in s.inputs:
            if t in owner:
                devices.setdefault(t, {})[where[s.name]] = None
    refreshes = []
    for p in trained:
        for device in devices.get(p, {}):
            if device != owner[p]:
                name = f"refresh:{p}@{device}"
                refreshes.append(Step(name, "refresh", (p, f"updated:{p}"), ()))
                where[name] = device
    return refreshes


def copied_as(tensor: str) -> str:
    """The tensor whose bytes a copy of `tensor` received on another device takes: an updated
    parameter's (``updated:<p>`` is p itself on its owner, updated in place, and a full copy of p
    where it is sent), else the tensor's own."""
    return tensor.removeprefix("updated:")


def forward_step_with_record(step: Step) -> Step:
    """`step` that also returns its autograd record ``saved:<node>``."""
    return Step(step.name, step.op_type, step.inputs, (*step.outputs, f"saved:{step.name}"))
