"""Deterministic weight initialisation shared by the zoo models.

Weights come from the global torch RNG, which `graphs.build_model` seeds; batch-norm statistics are
randomised (not left at mean 0 / var 1) so that folding them into convolutions is really exercised.
"""

from __future__ import annotations

import torch
from torch import nn


def on_meta(model: nn.Module) -> bool:
    """True for a model built on the meta device (to count parameters): there is nothing to fill."""
    return any(p.is_meta for p in model.parameters())


def init_conv_net(model: nn.Module) -> None:
    """He-normal convolutions, small linear layers, random but well-scaled batch-norm statistics."""
    if on_meta(model):
        return
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            # fan_in keeps activations O(1) through ~100 layers, so float32 comparisons stay tight
            nn.init.kaiming_normal_(module.weight, mode="fan_in", nonlinearity="relu")
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.BatchNorm2d):
            with torch.no_grad():
                module.weight.uniform_(0.5, 1.0)
                module.bias.normal_(0.0, 0.1)
                module.running_mean.normal_(0.0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.01)
            nn.init.zeros_(module.bias)


def init_uniform(model: nn.Module, scale: float) -> None:
    """Every parameter uniform in [-scale, scale] (the classic LSTM language-model init)."""
    if on_meta(model):
        return
    with torch.no_grad():
        for param in model.parameters():
            param.uniform_(-scale, scale)
