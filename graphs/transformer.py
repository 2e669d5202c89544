"""Transformer: a GPT-2-small-shaped decoder stack (Radford et al. 2019): 12 pre-norm blocks,
d_model 768, 12 heads, MLP 3072 with tanh-GELU, learned positions (1024), LM head tied to the
token embedding; 124M parameters at the default 50257-token vocabulary.

Defaults: batch 1, 64 tokens (about 16 GFLOP a step, a few tenths of a second on 2 CPU cores). `layers` and `vocab` shrink it (for tests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from graphs.init import on_meta
from graphs.spec import ZooModel
from placer.errors import PlacerError

D_MODEL = 768
HEADS = 12
POSITIONS = 1024


@dataclass(frozen=True)
class Options:
    batch: int = 1
    seq_len: int = 64
    layers: int = 12
    vocab: int = 50257


class Attention(nn.Module):
    """Causal multi-head self-attention with one fused QKV projection, as GPT-2's c_attn."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """`mask` is additive: 0 where a step may attend, -inf on the future."""
        batch, steps, d_model = x.shape
        q, k, v = self.qkv(x).split(self.heads * self.head_dim, dim=2)
        # [batch, heads, steps, head_dim]
        q, k, v = (t.reshape(batch, steps, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(self.head_dim)) + mask
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(out.transpose(1, 2).reshape(batch, steps, d_model))


class Block(nn.Module):
    """Pre-norm residual block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, heads)
        self.ln_2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), mask)
        return x + self.fc_proj(nn.functional.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """Token and position embeddings, the block stack, final norm, tied LM head."""

    def __init__(self, vocab: int, layers: int, d_model: int = D_MODEL, heads: int = HEADS) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(POSITIONS, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head_bias = nn.Parameter(torch.zeros(vocab))  # lets the head export as one Gemm
        # a constant the exporter folds to one [steps, steps] initializer shared by every layer
        self.register_buffer("causal_mask", torch.full((POSITIONS, POSITIONS), float("-inf")).triu(1),
                             persistent=False)
        self._init(layers)

    def _init(self, layers: int) -> None:
        # GPT-2's scheme: N(0, 0.02), residual projections scaled by 1/sqrt(2 * layers). Biases and
        # norm gains get a little noise, as trained ones have: identical all-zero (all-one) tensors
        # would be deduplicated by the exporter into Identity nodes no real model has.
        if on_meta(self):
            return
        for name, param in self.named_parameters():
            if param.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(param, std=std)
            elif name.endswith("bias"):
                nn.init.normal_(param, std=0.02)
            else:  # layer-norm gains
                nn.init.normal_(param, mean=1.0, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        batch, steps = tokens.shape
        positions = torch.arange(steps, device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        mask = self.causal_mask[:steps, :steps]
        for block in self.blocks:
            x = block(x, mask)
        x = self.ln_f(x).reshape(batch * steps, -1)
        # addmm on 2-D input exports as Gemm(transB=1) reading the embedding table itself,
        # so the tied weight is stored once rather than once more transposed
        logits = torch.addmm(self.head_bias, x, self.wte.weight.t())
        return logits.reshape(batch, steps, -1)


def build(options: Options) -> nn.Module:
    """GPT-2-small-shaped decoder with seeded weights (the caller seeds the RNG)."""
    if options.seq_len > POSITIONS:
        raise PlacerError(f"transformer: seq_len {options.seq_len} exceeds its {POSITIONS} positions; use --seq-len {POSITIONS} or less")
    return GPT(options.vocab, options.layers)


def example_inputs(options: Options) -> tuple[torch.Tensor, ...]:
    """Random token ids, [batch, seq_len] int64."""
    return (torch.randint(0, options.vocab, (options.batch, options.seq_len)),)


ENTRY = ZooModel(
    name="transformer",
    description="GPT-2-small-shaped decoder: 12 layers, d_model 768, 12 heads, tied LM head",
    options=Options, model=build, example_inputs=example_inputs,
    input_names=("tokens",), output_names=("logits",),
)
