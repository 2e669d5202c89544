"""RNNLM: a 2-layer LSTM language model (Zaremba et al. 2014), unrolled over time with each step's
cells as separate ops, as Mirhoseini et al. 2017 placed it. Predicts the next token at each step.

Defaults (batch 32, 20 steps, 512 hidden units, 10k vocabulary: the Penn Treebank's) keep one
forward step in the low hundreds of milliseconds on a 2-core CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from graphs.init import init_uniform
from graphs.lstm import LSTMCell
from graphs.spec import ZooModel

HIDDEN = 512
LAYERS = 2


@dataclass(frozen=True)
class Options:
    batch: int = 32
    seq_len: int = 20
    vocab: int = 10000


class RNNLM(nn.Module):
    """Embedding, LSTM layers unrolled step by step, a softmax projection at every step."""

    def __init__(self, vocab: int, hidden: int = HIDDEN, layers: int = LAYERS) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden)
        self.cells = nn.ModuleList(LSTMCell(hidden, hidden) for _ in range(layers))
        self.decoder = nn.Linear(hidden, vocab)
        init_uniform(self, 0.1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        batch, steps = tokens.shape
        embedded = self.embedding(tokens)
        states = [cell.zero_state(batch, embedded) for cell in self.cells]
        logits = []
        for t in range(steps):
            x = embedded[:, t]
            for layer, cell in enumerate(self.cells):
                states[layer] = cell(x, states[layer])
                x = states[layer][0]
            logits.append(self.decoder(x))
        return torch.stack(logits, dim=1)


def build(options: Options) -> nn.Module:
    """RNNLM with seeded weights (the caller seeds the RNG)."""
    return RNNLM(options.vocab)


def example_inputs(options: Options) -> tuple[torch.Tensor, ...]:
    """Random token ids, [batch, seq_len] int64."""
    return (torch.randint(0, options.vocab, (options.batch, options.seq_len)),)


ENTRY = ZooModel(
    name="rnnlm",
    description="2-layer LSTM language model, 512 units, unrolled (one set of ops per cell and step)",
    options=Options, model=build, example_inputs=example_inputs,
    input_names=("tokens",), output_names=("logits",),
)
