"""Signal-processing kernels: DFT, STFT and the window functions."""

from __future__ import annotations

import math

import torch

from placer.kernels.dtypes import torch_dtype
from placer.kernels.registry import Node, register


def _complex(x: torch.Tensor) -> torch.Tensor:
    """ONNX's real representation (last dim 1: real, 2: real+imag) -> a complex tensor."""
    if x.shape[-1] == 1:
        return x[..., 0].to(torch.complex128 if x.dtype == torch.float64 else torch.complex64)
    return torch.complex(x[..., 0], x[..., 1])


def _real(z: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.stack([z.real, z.imag], -1).to(dtype)


def _dft(x: torch.Tensor, length: int | None, axis: int, inverse: bool, onesided: bool
         ) -> torch.Tensor:
    axis = axis % x.dim()
    if axis == x.dim() - 1:
        raise ValueError("DFT over the real/imaginary axis")
    if length is None:
        length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    z = _complex(x)
    if inverse and onesided:
        return torch.fft.irfft(z, n=length, dim=axis).unsqueeze(-1).to(x.dtype)
    if inverse:
        return _real(torch.fft.ifft(z, n=length, dim=axis), x.dtype)
    y = torch.fft.fft(z, n=length, dim=axis)
    if onesided:
        y = y.narrow(axis, 0, length // 2 + 1)
    return _real(y, x.dtype)


def _scalar(t: torch.Tensor | None) -> int | None:
    if t is None or t.numel() == 0:
        return None
    return int(t.reshape(-1).tolist()[0])


@register("DFT", since=17, host_inputs=(1,))
def _dft17(node: Node):
    axis, inverse, onesided = node.attr("axis", 1), bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    return lambda xs: [_dft(xs[0], _scalar(xs[1]) if len(xs) > 1 else None, axis, inverse, onesided)]


@register("DFT", since=20, host_inputs=(1, 2))
def _dft20(node: Node):
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))

    def dft(xs):
        length = _scalar(xs[1]) if len(xs) > 1 else None
        axis = _scalar(xs[2]) if len(xs) > 2 else None
        return [_dft(xs[0], length, -2 if axis is None else axis, inverse, onesided)]
    return dft


@register("STFT", since=17, host_inputs=(1, 3))
def _stft(node: Node):
    onesided = bool(node.attr("onesided", 1))

    def stft(xs):
        xs = list(xs) + [None] * (4 - len(xs))
        x, step, window, frame_length = xs[0], _scalar(xs[1]), xs[2], _scalar(xs[3])
        if frame_length is None:
            frame_length = window.shape[0] if window is not None else x.shape[-2]
        size = window.shape[0] if window is not None else frame_length
        frames = x.unfold(1, size, step)                      # (batch, frames, 1|2, size)
        frames = frames.movedim(-1, -2)                       # (batch, frames, size, 1|2)
        if window is not None:
            frames = frames * window.to(x.dtype).reshape(-1, 1)
        return [_dft(frames, frame_length, -2, False, onesided)]
    return stft


def _window(node: Node, fn):
    periodic = bool(node.attr("periodic", 1))
    dtype = torch_dtype(node.attr("output_datatype", 1))

    def window(xs):
        n = _scalar(xs[0])
        return [fn(n, periodic=periodic, dtype=torch.float64).to(dtype)]
    return window


@register("HannWindow", since=17, host_inputs=(0,))
def _hann(node: Node):
    return _window(node, torch.hann_window)


@register("HammingWindow", since=17, host_inputs=(0,))
def _hamming(node: Node):
    # ONNX's coefficients are 25/46 and 21/46, not torch's default 0.54 / 0.46.
    return _window(node, lambda n, **kw: torch.hamming_window(n, alpha=25 / 46, beta=21 / 46, **kw))


@register("BlackmanWindow", since=17, host_inputs=(0,))
def _blackman(node: Node):
    return _window(node, torch.blackman_window)


@register("MelWeightMatrix", since=17, host_inputs=(0, 1, 2, 3, 4))
def _mel(node: Node):
    dtype = torch_dtype(node.attr("output_datatype", 1))

    def mel(xs):
        bins, dft_len, rate = _scalar(xs[0]), _scalar(xs[1]), _scalar(xs[2])
        lo, hi = (float(t.reshape(-1).tolist()[0]) for t in xs[3:5])
        spectrum = dft_len // 2 + 1

        lo_mel = 2595 * math.log10(1 + lo / 700)
        hi_mel = 2595 * math.log10(1 + hi / 700)
        # As the ONNX definition does: bins + 2 points spaced by (hi - lo) / (bins + 2).
        mels = torch.arange(bins + 2, dtype=torch.float64) * ((hi_mel - lo_mel) / (bins + 2)) + lo_mel
        hz = 700 * torch.expm1(mels / 2595 * math.log(10))
        edges = torch.floor((dft_len + 1) * hz / rate).long()
        k = torch.arange(spectrum).reshape(-1, 1)
        low, center, high = edges[:-2], edges[1:-1], edges[2:]
        up = (k - low) / (center - low).clamp_min(1)
        down = (high - k) / (high - center).clamp_min(1)
        rising = (k >= low) & (k <= center) & (center > low)
        falling = (k >= center) & (k < high) & (high > center)
        w = torch.where(falling, down, torch.where(rising, up, torch.zeros_like(up)))
        w = torch.where((center == low) & (k == center), torch.ones_like(w), w)
        return [w.to(dtype)]
    return mel
