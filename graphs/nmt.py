"""NMT: an LSTM encoder-decoder with attention (Bahdanau et al. 2015; Luong et al. 2015), unrolled
over time as Mirhoseini et al. 2017 placed it. The decoder is teacher-forced on `tgt_tokens`.

Encoder: a bidirectional LSTM layer (two independent chains, 256 units each way) then a 512-unit
layer. Decoder: 2 LSTM layers with input feeding, Luong "general" attention over the encoder
outputs at every step, and a softmax projection per step. Defaults: batch 16, 20 source and 20
target steps, 8k vocabularies (about 9 GFLOP a step).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from graphs.init import init_uniform
from graphs.lstm import LSTMCell
from graphs.spec import ZooModel

HIDDEN = 512


@dataclass(frozen=True)
class Options:
    batch: int = 16
    seq_len: int = 20   # both source and target length
    vocab: int = 8000   # both source and target vocabulary


class Encoder(nn.Module):
    """Bidirectional first layer, unidirectional second layer, all steps unrolled."""

    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden)
        self.forward_cell = LSTMCell(hidden, hidden // 2)
        self.backward_cell = LSTMCell(hidden, hidden // 2)
        self.top_cell = LSTMCell(hidden, hidden)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        batch, steps = tokens.shape
        embedded = self.embedding(tokens)
        fwd_state = self.forward_cell.zero_state(batch, embedded)
        bwd_state = self.backward_cell.zero_state(batch, embedded)
        fwd, bwd = [], [None] * steps
        for t in range(steps):
            fwd_state = self.forward_cell(embedded[:, t], fwd_state)
            fwd.append(fwd_state[0])
            bwd_state = self.backward_cell(embedded[:, steps - 1 - t], bwd_state)
            bwd[steps - 1 - t] = bwd_state[0]
        top_state = self.top_cell.zero_state(batch, embedded)
        outputs = []
        for t in range(steps):
            top_state = self.top_cell(torch.cat([fwd[t], bwd[t]], dim=1), top_state)
            outputs.append(top_state[0])
        # the decoder starts from the final states: both directions joined for layer 1, top for layer 2
        bottom_final = (torch.cat([fwd_state[0], bwd_state[0]], 1), torch.cat([fwd_state[1], bwd_state[1]], 1))
        return torch.stack(outputs, dim=1), [bottom_final, top_state]


class Decoder(nn.Module):
    """2 LSTM layers fed with [target embedding; previous attentional state], attention per step."""

    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden)
        self.cells = nn.ModuleList([LSTMCell(2 * hidden, hidden), LSTMCell(hidden, hidden)])
        # Luong's W_a ("general" score) and W_c [context; h]; with biases, as dense layers in TF's
        # NMT, so each exports as one Gemm reading its weight (no transposed copy per step)
        self.attention = nn.Linear(hidden, hidden)
        self.combine = nn.Linear(2 * hidden, hidden)
        self.projection = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor, memory: torch.Tensor,
                states: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        batch, steps = tokens.shape
        embedded = self.embedding(tokens)
        attentional = memory.new_zeros(batch, memory.shape[2])
        logits = []
        for t in range(steps):
            x = torch.cat([embedded[:, t], attentional], dim=1)
            for layer, cell in enumerate(self.cells):
                states[layer] = cell(x, states[layer])
                x = states[layer][0]
            scores = torch.bmm(memory, self.attention(x).unsqueeze(2)).squeeze(2)     # [batch, src]
            weights = torch.softmax(scores, dim=1)
            context = torch.bmm(weights.unsqueeze(1), memory).squeeze(1)               # [batch, hidden]
            attentional = torch.tanh(self.combine(torch.cat([context, x], dim=1)))
            logits.append(self.projection(attentional))
        return torch.stack(logits, dim=1)


class NMT(nn.Module):
    """Encoder-decoder: source tokens and (teacher-forced) target tokens in, target logits out."""

    def __init__(self, vocab: int, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.encoder = Encoder(vocab, hidden)
        self.decoder = Decoder(vocab, hidden)
        init_uniform(self, 0.1)

    def forward(self, src_tokens: torch.Tensor, tgt_tokens: torch.Tensor) -> torch.Tensor:
        memory, states = self.encoder(src_tokens)
        return self.decoder(tgt_tokens, memory, states)


def build(options: Options) -> nn.Module:
    """NMT with seeded weights (the caller seeds the RNG)."""
    return NMT(options.vocab)


def example_inputs(options: Options) -> tuple[torch.Tensor, ...]:
    """Random source and target token ids, each [batch, seq_len] int64."""
    shape = (options.batch, options.seq_len)
    return torch.randint(0, options.vocab, shape), torch.randint(0, options.vocab, shape)


ENTRY = ZooModel(
    name="nmt",
    description="LSTM encoder-decoder with attention (bidirectional encoder, 512 units), unrolled",
    options=Options, model=build, example_inputs=example_inputs,
    input_names=("src_tokens", "tgt_tokens"), output_names=("logits",),
)
