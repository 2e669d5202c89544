"""The torch callables of a training step's steps (`placer.program.training_plan` plans them,
plain data): each forward step on a gradient path runs its kernel on leaves that require a
gradient and returns its autograd record (`Saved`), each backward step is its node's
vector-Jacobian product on that record, a loss step gives its term and the output's gradient,
an accumulate step adds two gradients, an update step runs its parameter's optimizer, and a
refresh step copies the updated parameter into another device's copy of it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from placer.engines.torch.training import apply_update, build_optimizer, loss_term_and_grad
from placer.kernels.prepare import PreparedGraph
from placer.program.training import TrainingSpec
from placer.program.training_plan import TrainingPlan

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


def step_functions(plan: TrainingPlan, prepared: PreparedGraph, spec: TrainingSpec) -> dict[str, StepFn]:
    """Each step's callable, but a plain forward step's (its node's kernel) and an update's
    (`bind_updates`), by the step's name in one micro-batch's program: a pipelined step's
    micro-batch steps run their per-micro-batch step's (`placer.program.pipeline.Unrolled.names`
    maps them), its micro-batch sums their own."""
    functions: dict[str, StepFn] = {}
    for name, leaves in plan.leaves.items():
        functions[name] = _forward_fn(prepared.kernels[name], leaves)
    for name, (output, with_grad) in plan.losses.items():
        functions[name] = _loss_fn(spec, output, spec.targets.get(output), with_grad)
    for name, (node, output_positions) in plan.backwards.items():
        functions[name] = _backward_fn(node, output_positions)
    for name, in_place in plan.accumulates.items():
        functions[name] = _add_into if in_place else _add
    functions.update((s.name, _refresh) for s in plan.steps if s.op_type == "refresh")
    return functions


def bind_updates(plan: TrainingPlan, spec: TrainingSpec, param_on_owner: Callable[[str], torch.Tensor]
                 ) -> dict[str, StepFn]:
    """Each update step's callable: its optimizer, built over the parameter's copy on its owner."""
    return {f"update:{p}": _update_fn(spec, param_on_owner(p)) for p in plan.trained}


def training_results(plan: TrainingPlan, values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What a training step gives: ``loss`` (the sum of the terms, on the CPU), then each
    parameter's ``grad:<p>`` and ``updated:<p>`` (the live parameter, updated in place)."""
    loss = sum(values[t].detach().double().cpu() for t in plan.loss_terms)
    return {"loss": torch.as_tensor(loss, dtype=torch.float64),
            **{t: values[t] for t in plan.outputs if t not in plan.loss_terms}}


def _forward_fn(kernel, positions: list[tuple[int, ...]]) -> StepFn:
    """Run the kernel on detached inputs, those at `positions` (per leaf, the inputs reading it)
    requiring a gradient; outputs detached for the next steps, plus the record the backward step
    differentiates."""

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
        value, grad = loss_term_and_grad(spec.loss, output, inputs[0], target)
        return [value, grad] if with_grad else [value]
    return run


def _add(inputs: list) -> list:
    # A fresh tensor, not in place on a contribution: one may alias another tensor (an Add's
    # backward hands the same gradient to both its inputs).
    return [inputs[0] + inputs[1]]


def _add_into(inputs: list) -> list:
    # In place on the partial sum: an earlier accumulate step made it, and only this one reads it.
    return [inputs[0].add_(inputs[1])]


def _refresh(inputs: list) -> list:
    # Into this device's copy, in place: its next step reads that tensor. A copy, not the value
    # received: between virtual CPU devices that is the owner's live parameter itself, which the
    # owner's next update changes while this device may still read it.
    inputs[0].copy_(inputs[1])
    return []


def _update_fn(spec: TrainingSpec, param: torch.Tensor) -> StepFn:
    optimizer = build_optimizer(spec.optimizer, [param])

    def run(inputs: list) -> list:
        apply_update(optimizer, [inputs[0]], [inputs[1]])
        return [inputs[0]]
    return run
