"""The placement policy of Mirhoseini et al. (2017): a sequence-to-sequence model over groups.

group embedding -> bidirectional LSTM encoder -> LSTM decoder with content-based attention over
the encoder states (multiplicative, as Luong et al. 2015: the additive form of the paper builds a
samples x groups x hidden tensor at every step, which made it 3x slower to train here); at step t the decoder reads the previous group's device (a learned device
embedding) and the encoder state of group t, and emits a softmax over the devices for group t.
Logits are squashed as `tanh_constant * tanh(logits / temperature)`, as in the published code.
"""

from __future__ import annotations

import torch
from torch import nn


class Seq2SeqPolicy(nn.Module):
    """pi(devices | groups): samples one device per group, and scores given placements."""

    def __init__(self, n_features: int, n_groups: int, n_devices: int, hidden_size: int = 512,
                 temperature: float = 1.0, tanh_constant: float = 1.0, forget_bias: float = 1.0) -> None:
        super().__init__()
        self.n_groups, self.n_devices = n_groups, n_devices
        self.temperature, self.tanh_constant = temperature, tanh_constant
        # A group is its features plus its row and column of the adjacency (bytes out and in).
        self.embed = nn.Linear(n_features + 2 * n_groups, hidden_size)
        self.encoder = nn.LSTM(hidden_size, hidden_size, bidirectional=True, batch_first=True)
        self.device_embed = nn.Embedding(n_devices + 1, hidden_size)   # last index: "start"
        self.decoder = nn.LSTMCell(hidden_size + 2 * hidden_size, hidden_size)
        self.attn_query = nn.Linear(hidden_size, 2 * hidden_size, bias=False)
        self.head = nn.Linear(hidden_size + 2 * hidden_size, n_devices)
        self._init_forget_bias(forget_bias)

    def _init_forget_bias(self, value: float) -> None:
        # LSTM gate order is (input, forget, cell, output): start remembering, as the paper's code does.
        for name, param in list(self.encoder.named_parameters()) + list(self.decoder.named_parameters()):
            if name.startswith("bias_ih"):
                h = param.shape[0] // 4
                with torch.no_grad():
                    param[h:2 * h].fill_(value)

    def encode(self, features: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
        """Encoder states (groups, 2 x hidden) of one graph's groups."""
        x = torch.cat([features, adjacency, adjacency.T], dim=1)
        states, _ = self.encoder(torch.tanh(self.embed(x)).unsqueeze(0))
        return states.squeeze(0)

    def forward(self, features: torch.Tensor, adjacency: torch.Tensor, actions: torch.Tensor | None = None,
                n_samples: int = 1, generator: torch.Generator | None = None, greedy: bool = False):
        """Decode `n_samples` placements (sampled with `generator`, or the most likely device at
        each step with `greedy`), or score the given `actions` (samples x groups).
        Returns (actions, log-probability per sample, entropy per sample)."""
        chosen, log_probs, entropies = self.decode(features, adjacency, actions, n_samples, generator, greedy)
        return chosen, log_probs.sum(dim=1), entropies.sum(dim=1)

    def decode(self, features: torch.Tensor, adjacency: torch.Tensor, actions: torch.Tensor | None = None,
               n_samples: int = 1, generator: torch.Generator | None = None, greedy: bool = False):
        """Like `forward`, with the log-probability and entropy of every step: (K x groups) each."""
        enc = self.encode(features, adjacency)                      # (G, 2H)
        K = actions.shape[0] if actions is not None else n_samples
        scale = enc.shape[1] ** -0.5
        hidden = enc.new_zeros(K, self.decoder.hidden_size)
        cell = enc.new_zeros(K, self.decoder.hidden_size)
        prev = torch.full((K,), self.n_devices, dtype=torch.long, device=enc.device)
        chosen, log_probs, entropies = [], [], []
        for t in range(self.n_groups):
            step_in = torch.cat([self.device_embed(prev), enc[t].expand(K, -1)], dim=1)
            hidden, cell = self.decoder(step_in, (hidden, cell))
            scores = self.attn_query(hidden) @ enc.T * scale            # (K, G)
            context = torch.softmax(scores, dim=1) @ enc                # (K, 2H)
            logits = self.head(torch.cat([hidden, context], dim=1)) / self.temperature
            if self.tanh_constant > 0:
                logits = self.tanh_constant * torch.tanh(logits)
            log_p = torch.log_softmax(logits, dim=1)
            if actions is not None:
                a = actions[:, t]
            elif greedy:
                a = logits.argmax(dim=1)
            else:
                a = torch.multinomial(log_p.detach().exp(), 1, generator=generator).squeeze(1)
            chosen.append(a)
            log_probs.append(log_p.gather(1, a.unsqueeze(1)).squeeze(1))
            entropies.append(-(log_p.exp() * log_p).sum(dim=1))
            prev = a
        return torch.stack(chosen, dim=1), torch.stack(log_probs, dim=1), torch.stack(entropies, dim=1)
