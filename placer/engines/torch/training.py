"""The torch side of a training step's loss and optimizer (`placer.program.training` specifies
them): the targets checked into tensors, one output's loss term and its gradient, torch's
optimizers and their update."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.program.training import Loss, OptimizerSpec, class_axis, is_float


def check_targets(loss: Loss, graph: OpGraph, targets: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Targets checked against the graph's float outputs for `loss`: output name -> target tensor
    (labels made int64, as cross-entropy takes them)."""
    outputs = {o.name: o for o in graph.outputs if is_float(graph, o.name)}
    unknown = sorted(set(targets) - set(outputs))
    if unknown:
        raise PlacerError(f"targets given for {unknown}, which are not float outputs of the graph; "
                          f"the float outputs are {sorted(outputs)}")
    checked = {}
    for name, target in targets.items():
        shape = tuple(outputs[name].shape)
        if loss.kind == "mse":
            if tuple(target.shape) != shape or not target.is_floating_point():
                raise PlacerError(f"the target of {name!r} must be a float array of shape {shape} "
                                  f"(got {target.dtype} {tuple(target.shape)})")
        else:
            if target.is_floating_point() or target.is_complex():
                raise PlacerError(f"--loss cross_entropy needs integer labels for {name!r} "
                                  f"(got {target.dtype})")
            class_axis(name, shape, tuple(target.shape))
            target = target.long()
        checked[name] = target
    if loss.kind == "cross_entropy" and not checked:
        raise PlacerError("--loss cross_entropy needs integer labels for a logits output: give them "
                          f"in --targets (an .npz with one of {sorted(outputs)})")
    return checked


def loss_term(loss: Loss, name: str, output: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    """Output `name`'s term of `loss` (a scalar on the output's device), times its share."""
    if loss.kind == "mse":
        y = output.float() if output.dtype in (torch.float16, torch.bfloat16) else output
        d = y if target is None else y - target.to(y.device, y.dtype)   # no target: zero, y - 0 is y
        term = torch.mean(d ** 2) / 2
    else:
        axis = class_axis(name, tuple(output.shape), tuple(target.shape))
        logits = output.movedim(axis, 1) if axis != 1 else output
        term = torch.nn.functional.cross_entropy(logits.float(), target.to(output.device))
    share = loss.share(name)
    return term if share == 1.0 else term * share


def loss_term_and_grad(loss: Loss, name: str, output: torch.Tensor, target: torch.Tensor | None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """(term, d term / d output): where one output's backward pass starts."""
    with torch.inference_mode(False), torch.enable_grad():
        # a leaf sharing the output's memory (the term reads it only); an inference tensor
        # cannot require a gradient, so that one is copied
        y = (output.clone() if output.is_inference() else output.detach()).requires_grad_(True)
        value = loss_term(loss, name, y, target)
        (grad,) = torch.autograd.grad(value, y)
    return value.detach(), grad


def build_optimizer(spec: OptimizerSpec, params: Sequence[torch.Tensor]) -> torch.optim.Optimizer:
    """`spec`'s torch optimizer over `params` (tensors of one device; its state is made there)."""
    if spec.name == "sgd":
        return torch.optim.SGD(list(params), lr=spec.learning_rate, momentum=spec.momentum)
    return torch.optim.Adam(list(params), lr=spec.learning_rate)


def apply_update(optimizer: torch.optim.Optimizer, params: Sequence[torch.Tensor],
                 grads: Sequence[torch.Tensor | None]) -> None:
    """One optimizer step of `params` (updated in place) with `grads` (None: no gradient reached it)."""
    for p, g in zip(params, grads):
        p.grad = g
    with torch.inference_mode(False):
        optimizer.step()
    for p in params:
        p.grad = None
