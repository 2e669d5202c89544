"""Transformer ops of opset 23+: Attention and RotaryEmbedding."""

from __future__ import annotations

import math

import torch

from placer.kernels.dtypes import torch_dtype
from placer.kernels.registry import Node, register


def _heads(x: torch.Tensor, n: int) -> torch.Tensor:
    """(batch, seq, hidden) -> (batch, heads, seq, head_size)."""
    b, s, h = x.shape
    return x.reshape(b, s, n, h // n).transpose(1, 2)


def _frontier_bias(q_len: int, kv_len: int, offset, left: int, right: int, causal: bool,
                   dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
    """Additive 0/-inf bias of the causal and sliding-window constraints.

    `offset` (an int, or a (batch,) tensor for an external cache) aligns the query block to
    the end of the keys: query i sits at absolute position i + offset.
    """
    if not causal and left < 0 and right < 0:
        return None
    i = torch.arange(q_len, device=device).reshape(q_len, 1)
    j = torch.arange(kv_len, device=device).reshape(1, kv_len)
    if isinstance(offset, torch.Tensor):
        pos = i + offset.to(device).long().reshape(-1, 1, 1, 1)       # (batch, 1, q, 1)
    else:
        pos = i + offset
    diff = pos - j
    allowed = torch.ones_like(diff, dtype=torch.bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    zero = torch.zeros((), dtype=dtype, device=device)
    return torch.where(allowed, zero, torch.full((), -math.inf, dtype=dtype, device=device))


@register("Attention", since=23)
def _attention(node: Node):
    scale_attr = node.attr("scale")
    causal = bool(node.attr("is_causal", 0))
    q_heads, kv_heads = node.attr("q_num_heads"), node.attr("kv_num_heads")
    softcap = node.attr("softcap", 0.0)
    mode = node.attr("qk_matmul_output_mode", 0)
    precision = node.attr("softmax_precision")
    left, right = node.attr("left_window_size", -1), node.attr("right_window_size", -1)
    want_qk = node.n_outputs > 3 and node.outputs_used[3]

    def attention(xs):
        xs = list(xs) + [None] * (7 - len(xs))
        q, k, v, mask, past_k, past_v, nonpad = xs[:7]
        three_d = q.dim() == 3
        if three_d:
            q, k, v = _heads(q, q_heads), _heads(k, kv_heads), _heads(v, kv_heads)
        scale = scale_attr if scale_attr is not None else 1 / math.sqrt(q.shape[-1])
        # ONNX scales Q and K by sqrt(scale) each, in the input type.
        s = torch.tensor(math.sqrt(scale), dtype=q.dtype)
        if past_k is not None:
            k = torch.cat([past_k, k], 2)
            v = torch.cat([past_v, v], 2)
        present_k, present_v = k, v
        q_len, kv_len = q.shape[2], k.shape[2]
        dtype, dev = q.dtype, q.device
        bias = torch.zeros((q_len, kv_len), dtype=dtype, device=dev)
        if mask is not None:
            if mask.shape[-1] < kv_len:
                pad = [0, kv_len - mask.shape[-1]]
                mask = torch.nn.functional.pad(mask, pad, value=False if mask.dtype == torch.bool
                                               else -math.inf)
            if mask.dtype == torch.bool:
                mask = torch.where(mask, torch.zeros((), dtype=dtype, device=dev),
                                   torch.full((), -math.inf, dtype=dtype, device=dev))
            bias = bias + mask.to(dtype)
        if past_k is None and nonpad is not None:
            offset = nonpad.to(dev).long() - q_len
        else:
            offset = past_k.shape[2] if past_k is not None else 0
        frontier = _frontier_bias(q_len, kv_len, offset, left, right, causal, dtype, dev)
        if frontier is not None:
            bias = bias + frontier
        if nonpad is not None:
            keep = torch.arange(kv_len, device=dev) < nonpad.to(dev).long().reshape(-1, 1)
            bias = bias + torch.where(keep, 0.0, -math.inf).to(dtype).reshape(-1, 1, 1, kv_len)
        if q.shape[1] != k.shape[1]:
            # Grouped-query attention: each KV head serves q_heads / kv_heads query heads.
            reps = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(reps, 1), v.repeat_interleave(reps, 1)
        qk = torch.matmul(q * s, k.transpose(-1, -2) * s)
        if softcap:
            qk = torch.tanh(qk / softcap) * softcap
        logits = qk + bias
        qk_out = logits if mode == 2 else qk
        # A row with every key masked attends to nothing: zeros, not NaNs. Its logits are zeroed
        # before the softmax too, whose NaNs there would make NaN gradients through the where.
        dead = torch.isneginf(bias.amax(-1, keepdim=True))
        logits = torch.where(dead, torch.zeros((), dtype=dtype, device=dev), logits)
        if precision:
            logits = logits.to(torch_dtype(precision))
        probs = torch.softmax(logits, -1)
        probs = torch.where(dead, torch.zeros((), dtype=probs.dtype, device=dev), probs)
        if mode == 3:
            qk_out = probs
        y = torch.matmul(probs.to(dtype), v)
        if three_d:
            y = y.transpose(1, 2).reshape(y.shape[0], y.shape[2], -1)
        outs = [y, present_k, present_v]
        if want_qk:
            outs.append(qk_out.to(dtype))
        return outs
    return attention


@register("RotaryEmbedding", since=23)
def _rotary(node: Node):
    interleaved = bool(node.attr("interleaved", 0))
    rot_dim = node.attr("rotary_embedding_dim", 0)
    heads = node.attr("num_heads", 0)

    def rotary(xs):
        x, cos, sin = xs[0], xs[1], xs[2]
        pos = xs[3] if len(xs) > 3 else None
        shape = x.shape
        if x.dim() == 4:
            x = x.transpose(1, 2)                                 # (b, s, heads, d)
        else:
            x = x.reshape(shape[0], shape[1], heads, shape[2] // heads)
        d = rot_dim or x.shape[-1]
        rot, keep = x[..., :d], x[..., d:]
        if pos is not None:
            cos, sin = cos[pos.long()], sin[pos.long()]
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
        if interleaved:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
        else:
            x1, x2 = rot.chunk(2, -1)
        real = cos * x1 - sin * x2
        imag = sin * x1 + cos * x2
        if interleaved:
            rot = torch.stack([real, imag], -1).reshape(rot.shape)
        else:
            rot = torch.cat([real, imag], -1)
        y = torch.cat([rot, keep], -1)
        y = y.reshape(shape) if len(shape) == 3 else y.transpose(1, 2)
        return [y]
    return rotary


@register("CausalConvWithState", since=27)
def _causal_conv(node: Node):
    """Depthwise causal 1-D convolution that carries its last k-1 inputs as state."""
    act = node.attr("activation", "none")

    def causal(xs):
        xs = list(xs) + [None] * (4 - len(xs))
        x, w, b, past = xs[:4]
        k = w.shape[2]
        if past is None:
            past = torch.zeros(x.shape[0], x.shape[1], k - 1, dtype=x.dtype, device=x.device)
        padded = torch.cat([past, x], 2)
        y = torch.nn.functional.conv1d(padded, w, b, groups=x.shape[1])
        if act in ("silu", "swish"):
            y = torch.nn.functional.silu(y if y.dtype == torch.float64 else y.float()).to(x.dtype)
        return [y, padded[:, :, padded.shape[2] - (k - 1):]]
    return causal


@register("LinearAttention", since=27)
def _linear_attention(node: Node):
    """Linear attention with a (d_k x d_v) state per KV head; update rules linear, gated
    (decay), delta (beta) and gated_delta. The loop runs over time steps, as the recurrence
    asks; each step is batched over batch and heads."""
    rule = node.attr("update_rule", "gated_delta")
    q_heads, kv_heads, scale_attr = node.attr("q_num_heads"), node.attr("kv_num_heads"), node.attr("scale")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")

    def linear_attention(xs):
        xs = list(xs) + [None] * (6 - len(xs))
        q, k, v, past, decay, beta = xs[:6]
        b, t, _ = q.shape
        dk, dv = q.shape[-1] // q_heads, v.shape[-1] // kv_heads
        wide = torch.float64 if q.dtype == torch.float64 else torch.float32   # the state sums many steps
        q4 = _heads(q.to(wide), q_heads)
        k4, v4 = _heads(k.to(wide), kv_heads), _heads(v.to(wide), kv_heads)
        if decay is not None:
            g4 = decay.to(wide).reshape(b, t, kv_heads, -1).transpose(1, 2)     # (b, h, t, 1|dk)
        if beta is not None:
            beta4 = beta.to(wide).reshape(b, t, beta.shape[-1], 1).transpose(1, 2)
        state = past.to(wide) if past is not None else torch.zeros(b, kv_heads, dk, dv, dtype=wide, device=q.device)
        scale = scale_attr if scale_attr else 1 / math.sqrt(dk)
        group = q_heads // kv_heads
        outs = []
        for i in range(t):
            kt, vt = k4[:, :, i], v4[:, :, i]
            if gating:
                state = state * torch.exp(g4[:, :, i]).unsqueeze(-1)
            if delta:
                vt = beta4[:, :, i] * (vt - torch.einsum("bhdm,bhd->bhm", state, kt))
            state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
            read = state.repeat_interleave(group, 1) if group > 1 else state
            outs.append(scale * torch.einsum("bhd,bhdm->bhm", q4[:, :, i], read))
        y = torch.stack(outs, 2).transpose(1, 2).reshape(b, t, q_heads * dv).to(q.dtype)
        return [y, state.to(past.dtype if past is not None else q.dtype)]
    return linear_attention
