"""Recurrent layers: LSTM, GRU and RNN as ONNX defines them.

Gate order (ONNX: LSTM i,o,f,c; GRU z,r,h), directions (forward, reverse, bidirectional),
layouts 0/1, initial states, sequence_lens, peepholes, clip, custom activations and GRU's
linear_before_reset are all handled. The common case (default activations, no clip, no
peepholes, no sequence_lens, and for GRU linear_before_reset=1) runs on torch's fused
`torch.lstm` / `torch.gru`; everything else runs one time step at a time (the loop is over time,
the input projection of all steps is one matmul).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from placer.kernels.registry import Node, register

Act = Callable[[torch.Tensor], torch.Tensor]

_ALPHA_BETA = {  # activations that take (alpha, beta), with ONNX defaults
    "Affine": (1.0, 0.0), "LeakyRelu": (0.01, None), "ThresholdedRelu": (1.0, None),
    "ScaledTanh": (1.0, 1.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, None),
}


def _activation(name: str, alpha: float | None, beta: float | None) -> Act:
    name_l = name.lower()
    if name_l == "sigmoid":
        return torch.sigmoid
    if name_l == "tanh":
        return torch.tanh
    if name_l == "relu":
        return torch.relu
    if name_l == "softsign":
        return F.softsign
    if name_l == "softplus":
        return F.softplus
    if name_l == "affine":
        return lambda x: alpha * x + beta
    if name_l == "leakyrelu":
        return lambda x: F.leaky_relu(x, alpha)
    if name_l == "thresholdedrelu":
        return lambda x: torch.where(x > alpha, x, torch.zeros_like(x))
    if name_l == "scaledtanh":
        return lambda x: alpha * torch.tanh(beta * x)
    if name_l == "hardsigmoid":
        return lambda x: torch.clamp(alpha * x + beta, 0, 1)
    if name_l == "elu":
        return lambda x: F.elu(x, alpha)
    raise NotImplementedError(f"RNN activation {name!r}")


def _activations(node: Node, defaults: list[str], dirs: int) -> tuple[list[list[Act]], bool]:
    """Per-direction activation functions, and whether they are all the defaults."""
    names = list(node.attr("activations") or defaults * dirs)
    alphas = list(node.attr("activation_alpha") or [])
    betas = list(node.attr("activation_beta") or [])
    funcs: list[Act] = []
    for name in names:
        a, b = None, None
        canon = next((k for k in _ALPHA_BETA if k.lower() == name.lower()), None)
        if canon:
            da, db = _ALPHA_BETA[canon]
            a = alphas.pop(0) if alphas else da
            if db is not None:
                b = betas.pop(0) if betas else db
        funcs.append(_activation(name, a, b))
    k = len(defaults)
    per_dir = [funcs[d * k:(d + 1) * k] for d in range(dirs)]
    is_default = [n.lower() for n in names] == [d.lower() for d in defaults * dirs]
    return per_dir, is_default


@dataclass
class _Spec:
    kind: str            # LSTM | GRU | RNN
    hidden: int
    dirs: int
    reverse_only: bool
    layout: int
    clip: float | None
    acts: list[list[Act]]
    default_acts: bool
    input_forget: bool = False
    linear_before_reset: bool = False

    @property
    def gates(self) -> int:
        return {"LSTM": 4, "GRU": 3, "RNN": 1}[self.kind]


def _spec(node: Node, kind: str, defaults: list[str]) -> _Spec:
    direction = node.attr("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    acts, default = _activations(node, defaults, dirs)
    return _Spec(kind=kind, hidden=node.attr("hidden_size"), dirs=dirs,
                 reverse_only=direction == "reverse", layout=node.attr("layout", 0),
                 clip=node.attr("clip"), acts=acts, default_acts=default,
                 input_forget=bool(node.attr("input_forget", 0)),
                 linear_before_reset=bool(node.attr("linear_before_reset", 0)))


def _reverse_index(lengths: torch.Tensor | None, steps: int, batch: int,
                   device: torch.device) -> torch.Tensor | None:
    """Time index that reverses each sequence within its own length (None: reverse all)."""
    if lengths is None:
        return None
    t = torch.arange(steps, device=device).unsqueeze(1)
    L = lengths.to(device).long().unsqueeze(0)
    return torch.where(t < L, L - 1 - t, t)


def _time_gather(x: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    if index is None:
        return x.flip(0)
    return torch.gather(x, 0, index.reshape(index.shape + (1,) * (x.dim() - 2)).expand_as(x))


def _cell_loop(spec: _Spec, d: int, xw: torch.Tensor, r: torch.Tensor, rb: torch.Tensor | None,
               h: torch.Tensor, c: torch.Tensor | None, p: torch.Tensor | None,
               mask: torch.Tensor | None, wb_h: torch.Tensor | None):
    """Run one direction over time. xw: (T, B, gates*H) input projections with W's bias."""
    H = spec.hidden
    acts = spec.acts[d]
    clip = spec.clip
    ys = []
    rt = r.t()
    for t in range(xw.shape[0]):
        if spec.kind == "GRU":
            xz, xr, xh = xw[t].split(H, -1)
            rz, rr, rh = r.split(H, 0)
            rbz, rbr, rbh = rb.split(H) if rb is not None else (0, 0, 0)
            gz = xz + h @ rz.t() + rbz
            gr = xr + h @ rr.t() + rbr
            if clip is not None:
                gz, gr = gz.clamp(-clip, clip), gr.clamp(-clip, clip)
            z, rr_ = acts[0](gz), acts[0](gr)
            if spec.linear_before_reset:
                gh = xh + rr_ * (h @ rh.t() + rbh)
            else:
                gh = xh + (rr_ * h) @ rh.t() + rbh
            if clip is not None:
                gh = gh.clamp(-clip, clip)
            hh = acts[1](gh)
            h_new = (1 - z) * hh + z * h
            c_new = None
        else:
            g = xw[t] + h @ rt
            if rb is not None:
                g = g + rb
            if spec.kind == "RNN":
                if clip is not None:
                    g = g.clamp(-clip, clip)
                h_new, c_new = acts[0](g), None
            else:
                gi, go, gf, gc = g.split(H, -1)
                if p is not None:
                    pi, po, pf = p.split(H)
                    gi, gf = gi + pi * c, gf + pf * c
                if clip is not None:
                    gi, gf, gc = gi.clamp(-clip, clip), gf.clamp(-clip, clip), gc.clamp(-clip, clip)
                i, f = acts[0](gi), acts[0](gf)
                if spec.input_forget:
                    f = 1 - i
                c_new = f * c + i * acts[1](gc)
                if p is not None:
                    go = go + po * c_new
                if clip is not None:
                    go = go.clamp(-clip, clip)
                h_new = acts[0](go) * acts[2](c_new)
        if mask is not None:
            m = mask[t]
            h_new = torch.where(m, h_new, h)
            if c_new is not None:
                c_new = torch.where(m, c_new, c)
            ys.append(torch.where(m, h_new, torch.zeros_like(h_new)))
        else:
            ys.append(h_new)
        h, c = h_new, c_new
    return torch.stack(ys), h, c


def _reorder(w: torch.Tensor, order: list[int], H: int) -> torch.Tensor:
    """Permute gate blocks along dim 0 (ONNX gate order -> torch's)."""
    return torch.cat([w[i * H:(i + 1) * H] for i in order], 0)


class _RnnKernel:
    """A bound LSTM/GRU/RNN node; caches torch-ordered weights while the same tensors come in."""

    def __init__(self, spec: _Spec, n_outputs: int):
        self.spec = spec
        self.n_outputs = n_outputs
        self._key: tuple | None = None
        self._params: list[torch.Tensor] = []
        self._held: tuple = ()

    def _fast_ok(self, lengths, p) -> bool:
        s = self.spec
        if not s.default_acts or s.clip is not None or p is not None or lengths is not None:
            return False
        if s.kind == "LSTM":
            return not s.input_forget
        if s.kind == "GRU":
            return s.linear_before_reset
        return False

    def _torch_params(self, w, r, b) -> list[torch.Tensor]:
        # Reordered weights are reused while the very same, unmodified tensors come in. Not
        # while autograd records: each step then needs its own graph back to the weights.
        tracked = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (w, r, b))
        key = tuple(None if t is None else (id(t), 0 if t.is_inference() else t._version)
                    for t in (w, r, b))
        if not tracked and self._key == key:
            return self._params
        s, H = self.spec, self.spec.hidden
        order = [0, 2, 3, 1] if s.kind == "LSTM" else [1, 0, 2]
        params = []
        for d in range(s.dirs):
            wd, rd = _reorder(w[d], order, H), _reorder(r[d], order, H)
            if b is not None:
                wb, rb = b[d].split(s.gates * H)
                params += [wd, rd, _reorder(wb, order, H), _reorder(rb, order, H)]
            else:
                zeros = torch.zeros(s.gates * H, dtype=w.dtype, device=w.device)
                params += [wd, rd, zeros, zeros]
        params = [p.contiguous() for p in params]
        if not tracked:
            # Holding the inputs keeps their ids from being reused by other tensors.
            self._key, self._params, self._held = key, params, (w, r, b)
        return params

    def __call__(self, xs: list[torch.Tensor | None]) -> list[torch.Tensor]:
        s, H = self.spec, self.spec.hidden
        xs = list(xs) + [None] * (8 - len(xs))
        x, w, r, b, lengths, h0, c0, p = xs[:8]
        if s.kind != "LSTM":
            c0, p = None, None
        if s.layout == 1:
            x = x.transpose(0, 1)
            h0 = h0.transpose(0, 1) if h0 is not None else None
            c0 = c0.transpose(0, 1) if c0 is not None else None
        T, B = x.shape[0], x.shape[1]
        if h0 is None:
            h0 = torch.zeros(s.dirs, B, H, dtype=x.dtype, device=x.device)
        if c0 is None and s.kind == "LSTM":
            c0 = torch.zeros(s.dirs, B, H, dtype=x.dtype, device=x.device)
        if lengths is not None:
            # sequence_lens is a host input: reading it costs no device sync.
            if all(int(v) == T for v in lengths.reshape(-1).tolist()):
                lengths = None
        if self._fast_ok(lengths, p):
            y, hy, cy = self._fused(x, w, r, b, h0, c0)
        else:
            y, hy, cy = self._loop(x, w, r, b, lengths, h0, c0, p)
        # y: (T, dirs, B, H)
        if s.layout == 1:
            y = y.permute(2, 0, 1, 3)
            hy = hy.transpose(0, 1)
            cy = cy.transpose(0, 1) if cy is not None else None
        outs = [y, hy] + ([cy] if s.kind == "LSTM" else [])
        return outs[:self.n_outputs]

    def _fused(self, x, w, r, b, h0, c0):
        s, H = self.spec, self.spec.hidden
        params = self._torch_params(w, r, b)
        if s.reverse_only:
            x = x.flip(0)
        if s.kind == "LSTM":
            y, hy, cy = torch.lstm(x, (h0.contiguous(), c0.contiguous()), params, True, 1, 0.0,
                                   False, s.dirs == 2, False)
        else:
            y, hy = torch.gru(x, h0.contiguous(), params, True, 1, 0.0, False, s.dirs == 2, False)
            cy = None
        if s.reverse_only:
            y = y.flip(0)
        y = y.reshape(x.shape[0], x.shape[1], s.dirs, H).permute(0, 2, 1, 3)
        return y, hy, cy

    def _loop(self, x, w, r, b, lengths, h0, c0, p):
        s, H = self.spec, self.spec.hidden
        T, B = x.shape[0], x.shape[1]
        mask = None
        if lengths is not None:
            L = lengths.to(x.device).long()
            mask = (torch.arange(T, device=x.device).unsqueeze(1) < L.unsqueeze(0)).unsqueeze(-1)
        ys, hs, cs = [], [], []
        for d in range(s.dirs):
            backward = s.reverse_only or d == 1
            wb = rb = None
            if b is not None:
                wb, rb = b[d].split(s.gates * H)
            xw = torch.matmul(x, w[d].t())
            if wb is not None:
                xw = xw + wb
            rev = _reverse_index(lengths, T, B, x.device) if backward else None
            if backward:
                xw = _time_gather(xw, rev)
            y, h, c = _cell_loop(s, d, xw, r[d], rb, h0[d], c0[d] if c0 is not None else None,
                                 p[d] if p is not None else None, mask, None)
            if backward:
                y = _time_gather(y, rev)
            ys.append(y)
            hs.append(h)
            cs.append(c)
        y = torch.stack(ys, 1)
        hy = torch.stack(hs)
        cy = torch.stack(cs) if s.kind == "LSTM" else None
        return y, hy, cy


@register("LSTM", since=7, host_inputs=(4,))
def _lstm(node: Node):
    return _RnnKernel(_spec(node, "LSTM", ["Sigmoid", "Tanh", "Tanh"]), node.n_outputs)


@register("GRU", since=7, host_inputs=(4,))
def _gru(node: Node):
    return _RnnKernel(_spec(node, "GRU", ["Sigmoid", "Tanh"]), node.n_outputs)


@register("RNN", since=7, host_inputs=(4,))
def _rnn(node: Node):
    return _RnnKernel(_spec(node, "RNN", ["Tanh"]), node.n_outputs)
