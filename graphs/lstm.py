"""An LSTM cell written out in elementary ops, so an unrolled model exports one group of ONNX
nodes (MatMul/Gemm, Add, Split, Sigmoid, Tanh, Mul) per cell and time step, as in the TensorFlow
graphs of Mirhoseini et al. 2017 — not one fused ONNX `LSTM` node that could not be split."""

from __future__ import annotations

import torch
from torch import nn


class LSTMCell(nn.Module):
    """One step of a standard LSTM (gates i, f, g, o) on a [batch, features] input."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.ih = nn.Linear(input_size, 4 * hidden_size)
        self.hh = nn.Linear(hidden_size, 4 * hidden_size)  # two biases, as torch.nn.LSTMCell: both Gemm

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        h, c = state
        i, f, g, o = (self.ih(x) + self.hh(h)).split(self.hidden_size, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c

    def zero_state(self, batch: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """All-zero (h, c) for a batch, on `like`'s device and dtype."""
        zeros = like.new_zeros(batch, self.hidden_size)
        return zeros, zeros
