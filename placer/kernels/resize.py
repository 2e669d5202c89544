"""Resize (opsets 10, 11, 13, 18, 19) and Upsample: F.interpolate where it matches ONNX exactly,
otherwise a separable per-axis resampler that follows the ONNX definition for every mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from placer.kernels.registry import Node, register


@dataclass(frozen=True)
class _Mode:
    mode: str = "nearest"                     # nearest | linear | cubic
    coord: str = "half_pixel"                 # coordinate_transformation_mode
    nearest: str = "round_prefer_floor"       # nearest_mode
    cubic_a: float = -0.75
    exclude_outside: bool = False
    extrapolation: float = 0.0
    antialias: bool = False
    aspect: str = "stretch"                   # keep_aspect_ratio_policy


def _source(coord: str, n_in: int, n_out: int, scale: float, roi: tuple[float, float] | None,
            device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Source coordinate of every output position along one axis (float64), and for
    tf_crop_and_resize the mask of positions that fall outside the input."""
    y = torch.arange(n_out, dtype=torch.float64, device=device)
    width = scale * n_in          # ONNX uses the real-valued output width here
    outside = None
    if coord == "align_corners":
        # The spec (and its conformance tests) use the real-valued scale * n_in here, where
        # onnxruntime and torch use the integer length; they agree when it is a whole number.
        x = torch.zeros_like(y) if width == 1 else y * (n_in - 1) / (width - 1)
    elif coord == "asymmetric":
        x = y / scale
    elif coord == "tf_crop_and_resize":
        lo, hi = roi if roi is not None else (0.0, 1.0)
        if width == 1:
            x = torch.full_like(y, (hi - lo) * (n_in - 1) / 2)
        else:
            x = y * (hi - lo) * (n_in - 1) / (width - 1)
        x = x + lo * (n_in - 1)
        outside = (x < 0) | (x > n_in - 1)
    elif coord == "pytorch_half_pixel":
        x = torch.full_like(y, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif coord == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif coord == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(f"unknown coordinate_transformation_mode {coord!r}")
    return x, outside


def _keys(d: torch.Tensor, a: float) -> torch.Tensor:
    """The cubic convolution kernel (Keys) at distances d."""
    d = d.abs()
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return torch.where(d <= 1, near, torch.where(d < 2, far, torch.zeros_like(d)))


def _resample_axis(x: torch.Tensor, axis: int, n_out: int, scale: float, m: _Mode,
                   roi: tuple[float, float] | None) -> torch.Tensor:
    n_in = x.shape[axis]
    src, outside = _source(m.coord, n_in, n_out, scale, roi, x.device)
    base = torch.floor(src)
    frac = src - base
    shape = [1] * x.dim()
    shape[axis] = n_out
    if m.mode == "nearest":
        if m.nearest == "round_prefer_floor":
            idx = torch.where(frac <= 0.5, base, base + 1)
        elif m.nearest == "round_prefer_ceil":
            idx = torch.where(frac < 0.5, base, base + 1)
        elif m.nearest == "floor":
            idx = base
        else:
            idx = torch.ceil(src)
        y = torch.index_select(x, axis, idx.long().clamp(0, n_in - 1))
    else:
        # Taps around the source position; antialiasing widens the kernel by 1/scale when
        # downsampling (both as ONNX defines them).
        support = 1.0 if m.mode == "linear" else 2.0
        stretch = min(scale, 1.0) if m.antialias else 1.0
        start = math.floor(-support / stretch) + 1
        taps = base.long().unsqueeze(-1) + torch.arange(start, 2 - start, device=x.device)
        d = (taps.to(src.dtype) - src.unsqueeze(-1)) * stretch
        w = (1 - d.abs()).clamp_min(0) if m.mode == "linear" else _keys(d, m.cubic_a)
        if m.antialias:
            w = w / w.sum(-1, keepdim=True)
        if m.exclude_outside:
            w = torch.where((taps < 0) | (taps >= n_in), torch.zeros_like(w), w)
            w = w / w.sum(-1, keepdim=True).clamp_min(1e-300)
        k = taps.shape[-1]
        gathered = torch.index_select(x, axis, taps.clamp(0, n_in - 1).reshape(-1))
        gshape = list(x.shape)
        gshape[axis:axis + 1] = [n_out, k]
        wshape = [1] * (x.dim() + 1)
        wshape[axis:axis + 2] = [n_out, k]
        y = (gathered.reshape(gshape) * w.to(x.dtype).reshape(wshape)).sum(axis + 1)
    if outside is not None:
        y = torch.where(outside.reshape(shape), torch.full_like(y, m.extrapolation), y)
    return y


def _fast_mode(m: _Mode, scales: list[float], sizes_given: bool, x: torch.Tensor,
               out: list[int]) -> str | None:
    """The F.interpolate mode that computes exactly what ONNX asks, or None."""
    if m.antialias or m.exclude_outside or not (3 <= x.dim() <= 5) or out[:2] != list(x.shape[:2]):
        return None
    if any(s <= 0 for s in scales) or scales[:2] != [1.0, 1.0]:
        return None
    spatial = x.dim() - 2
    if m.mode == "nearest":
        if m.coord == "asymmetric" and m.nearest == "floor":
            return "nearest"
        if m.coord in ("half_pixel", "pytorch_half_pixel") and m.nearest == "round_prefer_ceil" \
                and (m.coord == "half_pixel" or all(o > 1 for o in out[2:])):
            return "nearest-exact"
        return None
    linear = {1: "linear", 2: "bilinear", 3: "trilinear"}[spatial]
    if m.mode == "linear":
        if m.coord == "half_pixel" or (m.coord == "pytorch_half_pixel" and all(o > 1 for o in out[2:])):
            return linear
        if m.coord == "align_corners" and (sizes_given or all(
                float(s * n).is_integer() for s, n in zip(scales[2:], x.shape[2:]))):
            return linear + "+corners"
        return None
    if m.mode == "cubic" and spatial == 2 and m.cubic_a == -0.75 and m.coord == "half_pixel":
        return "bicubic"
    return None


def _resize(x: torch.Tensor, m: _Mode, roi: list[float] | None, scales: list[float] | None,
            sizes: list[int] | None, axes: list[int] | None) -> torch.Tensor:
    rank = x.dim()
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    full_scales = [1.0] * rank
    out = list(x.shape)
    full_roi = None
    if roi:
        full_roi = [0.0] * rank + [1.0] * rank
        for i, a in enumerate(axes):
            full_roi[a], full_roi[rank + a] = roi[i], roi[len(axes) + i]
    if sizes:
        for i, a in enumerate(axes):
            out[a] = sizes[i]
            full_scales[a] = sizes[i] / x.shape[a] if x.shape[a] else 1.0
        if m.aspect != "stretch":
            pick = min if m.aspect == "not_larger" else max
            s = pick(full_scales[a] for a in axes)
            for a in axes:
                full_scales[a] = s
                out[a] = int(s * x.shape[a] + 0.5)
    else:
        for i, a in enumerate(axes):
            full_scales[a] = scales[i]
            out[a] = int(math.floor(scales[i] * x.shape[a]))
    if list(out) == list(x.shape) and all(s == 1.0 for s in full_scales) and m.coord != "tf_crop_and_resize":
        return x
    fast = _fast_mode(m, full_scales, bool(sizes), x, out)
    if fast is not None:
        corners = fast.endswith("+corners")
        mode = fast.removesuffix("+corners")
        kwargs = {"align_corners": corners} if mode not in ("nearest", "nearest-exact") else {}
        if sizes or corners:
            return F.interpolate(x, size=out[2:], mode=mode, **kwargs)
        return F.interpolate(x, scale_factor=full_scales[2:], mode=mode, **kwargs)
    y = x if x.dtype.is_floating_point else x.double()
    for a in range(rank):
        axis_roi = (full_roi[a], full_roi[rank + a]) if full_roi else None
        if out[a] == y.shape[a] and full_scales[a] == 1.0 and (
                axis_roi is None or axis_roi == (0.0, 1.0)):
            continue
        y = _resample_axis(y, a, out[a], full_scales[a], m, axis_roi)
    return y.to(x.dtype)


def _mode(node: Node) -> _Mode:
    return _Mode(mode=node.attr("mode", "nearest"),
                 coord=node.attr("coordinate_transformation_mode", "half_pixel"),
                 nearest=node.attr("nearest_mode", "round_prefer_floor"),
                 cubic_a=node.attr("cubic_coeff_a", -0.75),
                 exclude_outside=bool(node.attr("exclude_outside", 0)),
                 extrapolation=node.attr("extrapolation_value", 0.0),
                 antialias=bool(node.attr("antialias", 0)),
                 aspect=node.attr("keep_aspect_ratio_policy", "stretch"))


def _floats(t: torch.Tensor | None) -> list[float] | None:
    return None if t is None or t.numel() == 0 else [float(v) for v in t.reshape(-1).tolist()]


@register("Upsample", since=7)
def _upsample7(node: Node):
    m = _Mode(mode=node.attr("mode", "nearest"), coord="asymmetric", nearest="floor")
    scales = list(node.attr("scales"))
    return lambda xs: [_resize(xs[0], m, None, scales, None, None)]


@register("Upsample", since=9, host_inputs=(1,))
def _upsample9(node: Node):
    m = _Mode(mode=node.attr("mode", "nearest"), coord="asymmetric", nearest="floor")
    return lambda xs: [_resize(xs[0], m, None, _floats(xs[1]), None, None)]


@register("Resize", since=10, host_inputs=(1,))
def _resize10(node: Node):
    m = _Mode(mode=node.attr("mode", "nearest"), coord="asymmetric", nearest="floor")
    return lambda xs: [_resize(xs[0], m, None, _floats(xs[1]), None, None)]


@register("Resize", since=11, host_inputs=(1, 2, 3))
def _resize11(node: Node):
    m = _mode(node)
    axes = node.attr("axes")
    axes = list(axes) if axes is not None else None

    def resize(xs):
        roi = _floats(xs[1]) if len(xs) > 1 else None
        scales = _floats(xs[2]) if len(xs) > 2 else None
        sizes = xs[3].reshape(-1).tolist() if len(xs) > 3 and xs[3] is not None else None
        return [_resize(xs[0], m, roi, scales, sizes or None, axes)]
    return resize
