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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from placer.graph.opgraph import OpGraph
from placer.kernels.prepare import PreparedGraph, prepare
from placer.program.training import (TrainingSpec, apply_update, check_differentiable, gradient_tensors,
                                     host_read_inputs, trained_parameters)
from placer.program.walk import Step

StepFn = Callable[[list], list]

try:   # what torch.autograd.grad calls after checking its arguments (see _vjp)
    from torch.autograd.graph import _engine_run_backward
except ImportError:   # a torch without it: the public call
    _engine_run_backward = None


class Saved:
    """A forward step's autograd record: the leaves it differentiates by and its outputs."""

    __slots__ = ("leaves", "outputs")

    def __init__(self, leaves: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        self.leaves, self.outputs = leaves, outputs


@dataclass
class TrainingPlan:
    """A graph's training step under one assignment: every step in a valid order, its device,
    its function (update functions are bound once the parameters are on their devices)."""

    steps: list[Step]
    assignment: dict[str, str]                  # step name -> device
    functions: dict[str, StepFn]                # step name -> callable (update steps: see bind_updates)
    trained: list[str]                          # parameter names, in the file's order
    owner: dict[str, str]                       # parameter -> device holding its update and state
    loss_terms: list[str]                       # tensor names of the loss terms
    outputs: list[str] = field(default_factory=list)   # loss terms, grad:<p>, updated:<p>
    gradient_of: dict[str, str] = field(default_factory=dict)  # grad:<t>[@<node>] -> t

    def state_bytes(self, spec: TrainingSpec, size: Callable[[str], int]) -> dict[str, int]:
        """Device -> bytes of the optimizer state it holds for the parameters it updates."""
        held: dict[str, int] = {}
        for p, device in self.owner.items():
            held[device] = held.get(device, 0) + spec.optimizer.state_bytes(size(p))
        return held

    def results(self, values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """What a training step gives: ``loss`` (the sum of the terms, on the CPU), then each
        parameter's ``grad:<p>`` and ``updated:<p>`` (the live parameter, updated in place)."""
        loss = sum(values[t].detach().double().cpu() for t in self.loss_terms)
        return {"loss": torch.as_tensor(loss, dtype=torch.float64),
                **{t: values[t] for t in self.outputs if t not in self.loss_terms}}

    def bind_updates(self, spec: TrainingSpec, param_on_owner: Callable[[str], torch.Tensor]) -> None:
        """Give each update step its optimizer, built over the parameter's copy on its owner."""
        for p in self.trained:
            self.functions[f"update:{p}"] = _update_fn(spec, param_on_owner(p))


def training_prepared(graph: OpGraph, prepared: PreparedGraph | None) -> PreparedGraph:
    """`prepared` when no folded node reads a parameter a training step may update (its value
    changes every step), else the graph prepared again with those left to run. Every float
    output's parameters: those of any loss (a loss covers float outputs only)."""
    trained = set(trained_parameters(graph, host_read_inputs(graph)))
    if prepared is not None and not any(t in trained for n in prepared.folded_nodes for t in graph.nodes[n].inputs):
        return prepared
    return prepare(graph, variables=trained)


def plan_training(graph: OpGraph, prepared: PreparedGraph | None, assignment: dict[str, str],
                  forward: Sequence[Step], spec: TrainingSpec) -> TrainingPlan:
    """The training step of `forward` (the placed forward steps) with `spec`'s loss and optimizer.
    Without `prepared` the forward steps get no kernel: a plan of the steps only (the simulator's)."""
    host = host_read_inputs(graph)
    # the outputs the loss has terms for: every gradient, so every trained parameter, starts there
    loss_outputs = spec.loss.outputs(graph, spec.targets)
    trained = trained_parameters(graph, host, loss_outputs)
    reached = gradient_tensors(graph, host, loss_outputs)
    needs = set(trained)   # tensors a gradient must be computed for: reached and made from a parameter
    for step in forward:
        positions = host(step.name)
        if any(t in needs for i, t in enumerate(step.inputs) if i not in positions):
            needs.update(t for t in step.outputs if t in reached)

    def diff_inputs(step: Step) -> list[str]:
        positions = host(step.name)
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
    kernels = prepared.kernels if prepared is not None else {}
    functions: dict[str, StepFn] = {s.name: _forward_fn(kernels.get(s.name), s, diff_inputs(s))
                                    for s in grad_steps}
    loss_terms = []
    for o in loss_outputs:
        name, target = f"loss:{o}", spec.targets.get(o)
        grads = (contribution(o, name),) if o in needs else ()
        steps.append(Step(name, "loss", (o,), (f"loss_term:{o}", *grads)))
        where[name] = home_of(o)
        functions[name] = _loss_fn(spec, o, target, bool(grads))
        loss_terms.append(f"loss_term:{o}")

    # A tensor's contributions are summed as they arrive (the loss's first, then the backward
    # steps in reverse order), into a running sum on the device that uses the total: the
    # producer's (a parameter: its owner's, the device of its last contributor). Summing them all
    # at the end kept every contribution alive until then: rnnlm's decoder weight, 20 readers,
    # held 20 fresh 20 MB gradients a step, each paid for in page faults.
    running: dict[str, tuple[str, int]] = {}   # tensor -> (its partial sum's name, contributions in it)

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
        functions[name] = _add if n == 1 else _add_into
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
        functions[name] = _backward_fn(s.name, [s.outputs.index(t) for t in outs])
        for t in diffs:
            arrive(t, s.name)
        for p in diffs:
            if p in pending:
                contributed(p, assignment[s.name])
    outputs = loss_terms + [f"grad:{p}" for p in trained] + [f"updated:{p}" for p in trained]
    return TrainingPlan(steps, where, functions, trained, owner, loss_terms, outputs, gradient_of)


def forward_step_with_record(step: Step) -> Step:
    """`step` that also returns its autograd record ``saved:<node>``."""
    return Step(step.name, step.op_type, step.inputs, (*step.outputs, f"saved:{step.name}"))


def _forward_fn(kernel, step: Step, diffs: list[str]) -> StepFn:
    """Run the kernel on detached inputs, those in `diffs` requiring a gradient; outputs detached
    for the next steps, plus the record the backward step differentiates."""
    positions = [[i for i, t in enumerate(step.inputs) if t == d] for d in diffs]

    def run(inputs: list) -> list:
        inputs = list(inputs)
        leaves = []
        for where in positions:
            leaf = inputs[where[0]].detach().requires_grad_(True)
            for i in where:
                inputs[i] = leaf
            leaves.append(leaf)
        outputs = kernel(inputs)
        return [o.detach() for o in outputs] + [Saved(leaves, list(outputs))]
    return run


def _backward_fn(node: str, output_positions: list[int]) -> StepFn:
    """The node's vector-Jacobian product: gradients of its leaves from its outputs' gradients."""

    def run(inputs: list) -> list:
        saved, grads = inputs[0], inputs[1:]
        outs, out_grads = [], []
        for k, g in zip(output_positions, grads):
            if saved.outputs[k].requires_grad:
                outs.append(saved.outputs[k])
                out_grads.append(g)
        if not outs:
            raise RuntimeError(f"node {node!r} has no backward: its kernel's outputs carry no gradient")
        result = _vjp(tuple(outs), tuple(saved.leaves), tuple(out_grads))
        return [torch.zeros_like(leaf) if r is None else r for leaf, r in zip(saved.leaves, result)]
    return run


def _vjp(outputs: tuple, leaves: tuple, grads: tuple) -> tuple:
    """``torch.autograd.grad(outputs, leaves, grads, allow_unused=True)`` without its Python checks
    of every argument (tensor-likes, torch functions, each gradient's shape against its output),
    which our kernels' own outputs and gradients pass by construction: nmt runs 1,687 backward
    steps, and the checks were 45 ms of its 0.75 s step. torch's own helper, where it has one."""
    if _engine_run_backward is None:
        return torch.autograd.grad(outputs, leaves, grads, allow_unused=True)
    return _engine_run_backward(outputs, grads, False, False, leaves, True, accumulate_grad=False)


def _loss_fn(spec: TrainingSpec, output: str, target: torch.Tensor | None, with_grad: bool) -> StepFn:
    def run(inputs: list) -> list:
        value, grad = spec.loss.term_and_grad(output, inputs[0], target)
        return [value, grad] if with_grad else [value]
    return run


def _add(inputs: list) -> list:
    # A fresh tensor, not in place on a contribution: one may alias another tensor (an Add's
    # backward hands the same gradient to both its inputs).
    return [inputs[0] + inputs[1]]


def _add_into(inputs: list) -> list:
    # In place on the partial sum: an earlier accumulate step made it, and only this one reads it.
    return [inputs[0].add_(inputs[1])]


def _update_fn(spec: TrainingSpec, param: torch.Tensor) -> StepFn:
    optimizer = spec.optimizer.build([param])

    def run(inputs: list) -> list:
        apply_update(optimizer, [inputs[0]], [inputs[1]])
        return [inputs[0]]
    return run
