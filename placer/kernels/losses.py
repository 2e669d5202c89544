"""Training losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from placer.kernels.registry import Node, register

# torch needs some ignore_index; one no real class id can take stands for "none".
_NO_IGNORE = -(2**62)


def _nll(log_prob: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
         reduction: str, ignore: int) -> torch.Tensor:
    # torch's nll_loss has no float16 kernel on the CPU: compute in float32 there.
    lp = log_prob.float() if log_prob.dtype == torch.float16 else log_prob
    t = target.long()
    if weight is None:
        return F.nll_loss(lp, t, ignore_index=ignore, reduction=reduction)
    # torch's nll_loss has no gradient for the class weights: weigh its unreduced losses here
    kept = t != ignore
    w = weight.to(lp.dtype)[torch.where(kept, t, 0)] * kept
    losses = F.nll_loss(lp, t, ignore_index=ignore, reduction="none") * w
    if reduction == "none":
        return losses
    return losses.sum() if reduction == "sum" else losses.sum() / w.sum()


@register("NegativeLogLikelihoodLoss", since=12)
def _nll_loss(node: Node):
    reduction, ignore = node.attr("reduction", "mean"), node.attr("ignore_index", _NO_IGNORE)

    def nll(xs):
        x, target = xs[0], xs[1]
        weight = xs[2] if len(xs) > 2 else None
        return [_nll(x, target, weight, reduction, ignore).to(x.dtype)]
    return nll


@register("SoftmaxCrossEntropyLoss", since=12)
def _softmax_ce(node: Node):
    reduction, ignore = node.attr("reduction", "mean"), node.attr("ignore_index", _NO_IGNORE)
    want_log_prob = node.n_outputs > 1 and node.outputs_used[1]

    def sce(xs):
        x, target = xs[0], xs[1]
        weight = xs[2] if len(xs) > 2 else None
        log_prob = torch.log_softmax(x, 1)
        loss = _nll(log_prob, target, weight, reduction, ignore).to(x.dtype)
        return [loss, log_prob] if want_log_prob else [loss]
    return sce
