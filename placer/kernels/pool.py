"""Pooling: MaxPool, AveragePool, LpPool and their global forms."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from placer.kernels._padding import fixed_pads, pad_input, same_pads
from placer.kernels.reduce import root
from placer.kernels.registry import Node, register

_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _geometry(node: Node):
    kernel = list(node.attr("kernel_shape"))
    n = len(kernel)
    strides = list(node.attr("strides") or [1] * n)
    dil = list(node.attr("dilations") or [1] * n)
    begins, ends = fixed_pads(node.attr("pads"), n)
    return kernel, n, strides, dil, begins, ends


def _resolve_pads(node: Node, x: torch.Tensor, kernel, strides, dil, begins, ends):
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        return same_pads(auto_pad, x.shape[2:], kernel, strides, dil)
    return begins, ends


def _ceil_extra(sizes, kernel, strides, dil, begins, ends):
    """Extra end padding that turns ceil_mode into floor mode (windows must start in bounds)."""
    extra = []
    for size, k, s, d, b, e in zip(sizes, kernel, strides, dil, begins, ends):
        eff = (k - 1) * d + 1
        out = math.ceil((size + b + e - eff) / s) + 1
        if (out - 1) * s >= size + b:   # the last window would start in the end padding
            out -= 1
        extra.append(max((out - 1) * s + eff - (size + b + e), 0))
    return extra


@register("MaxPool", since=1)
def _maxpool(node: Node):
    kernel, n, strides, dil, begins0, ends0 = _geometry(node)
    ceil_mode = bool(node.attr("ceil_mode", 0))
    want_indices = node.n_outputs > 1 and node.outputs_used[1]
    storage_col = node.attr("storage_order", 0) == 1

    def maxpool(xs):
        x = xs[0]
        begins, ends = _resolve_pads(node, x, kernel, strides, dil, begins0, ends0)
        fits = begins == ends and all(2 * b <= k for b, k in zip(begins, kernel))
        if fits:
            # torch's ceil_mode drops windows that start in the end padding, as ONNX does.
            if want_indices:
                y, idx = _MAX[n](x, kernel, strides, begins, dil, ceil_mode, True)
                return [y, _onnx_indices(x, idx, begins, storage_col)]
            return [_MAX[n](x, kernel, strides, begins, dil, ceil_mode)]
        if want_indices:
            raise NotImplementedError("MaxPool indices with asymmetric padding")
        if ceil_mode:
            extra = _ceil_extra(x.shape[2:], kernel, strides, dil, begins, ends)
            ends = [e + a for e, a in zip(ends, extra)]
        xp = pad_input(x, begins, ends, value=-math.inf)
        return [_MAX[n](xp, kernel, strides, 0, dil, False)]

    def run(xs):
        x = xs[0]
        if x.dtype.is_floating_point:
            return maxpool(xs)
        # torch pools floats only; 8-bit integers are exact in float64.
        out = maxpool([x.double()])
        return [out[0].to(x.dtype)] + out[1:]
    return run


def _onnx_indices(x: torch.Tensor, idx: torch.Tensor, begins, storage_col: bool) -> torch.Tensor:
    """torch's per-plane flat indices -> ONNX's indices into the whole flattened input."""
    spatial = x.shape[2:]
    plane = math.prod(spatial)
    if storage_col:
        # Column-major within a plane (only meaningful for 2-D): i*W + j -> j*H + i.
        h, w = spatial[-2], spatial[-1]
        idx = (idx % w) * h + idx // w
    base = torch.arange(x.shape[0] * x.shape[1], device=x.device).reshape(
        x.shape[0], x.shape[1], *([1] * len(spatial))) * plane
    return idx + base


@register("AveragePool", since=1)
def _avgpool(node: Node):
    kernel, n, strides, dil, begins0, ends0 = _geometry(node)
    ceil_mode = bool(node.attr("ceil_mode", 0))
    include = bool(node.attr("count_include_pad", 0))
    dilated = any(d != 1 for d in dil)

    def avgpool(xs):
        x = xs[0]
        begins, ends = _resolve_pads(node, x, kernel, strides, dil, begins0, ends0)
        extra = [0] * n
        if ceil_mode:
            extra = _ceil_extra(x.shape[2:], kernel, strides, dil, begins, ends)
        fits = begins == ends and all(2 * b <= k for b, k in zip(begins, kernel))
        if fits and not any(extra) and not dilated:
            return [_AVG[n](x, kernel, strides, begins, False, include)]
        # Explicit padding: the window mean is sum(x) / count, where count covers the real
        # input (and the declared pads when count_include_pad), never the ceil-mode overhang.
        ends_all = [e + a for e, a in zip(ends, extra)]
        xp = pad_input(x, begins, ends_all)
        ones = torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype, device=x.device)
        if include:
            mask = pad_input(pad_input(ones, begins, ends, value=1.0), [0] * n, extra)
        else:
            mask = pad_input(ones, begins, ends_all)
        total = _window_sum(xp, kernel, strides, dil)
        count = _window_sum(mask, kernel, strides, dil)
        return [total / count]
    return avgpool


def _window_sum(x: torch.Tensor, kernel, strides, dil) -> torch.Tensor:
    """Sum over each (dilated) window of an already padded input."""
    n = len(kernel)
    if all(d == 1 for d in dil):
        return _AVG[n](x, kernel, strides, 0, False, True) * math.prod(kernel)
    # torch's avg pools have no dilation; a depthwise convolution with ones does.
    c = x.shape[1]
    ones = torch.ones((c, 1, *kernel), dtype=x.dtype, device=x.device)
    return _CONV[n](x, ones, None, strides, 0, dil, c)


@register("GlobalAveragePool")
def _gap(node: Node):
    return lambda xs: [xs[0].mean(dim=tuple(range(2, xs[0].dim())), keepdim=True)]


@register("GlobalMaxPool")
def _gmp(node: Node):
    return lambda xs: [xs[0].amax(dim=tuple(range(2, xs[0].dim())), keepdim=True)]


@register("LpPool", since=2)
def _lppool(node: Node):
    kernel, n, strides, dil, begins0, ends0 = _geometry(node)
    p = node.attr("p", 2)
    ceil_mode = bool(node.attr("ceil_mode", 0))

    def lppool(xs):
        x = xs[0]
        begins, ends = _resolve_pads(node, x, kernel, strides, dil, begins0, ends0)
        if ceil_mode:
            extra = _ceil_extra(x.shape[2:], kernel, strides, dil, begins, ends)
            ends = [e + a for e, a in zip(ends, extra)]
        xp = pad_input(x.abs().pow(p), begins, ends)
        return [root(_window_sum(xp, kernel, strides, dil), p)]
    return lppool


@register("GlobalLpPool", since=2)
def _glppool(node: Node):
    p = node.attr("p", 2)
    return lambda xs: [root(xs[0].abs().pow(p).sum(dim=tuple(range(2, xs[0].dim())), keepdim=True), p)]


@register("MaxUnpool", since=9, host_inputs=(2,))
def _maxunpool(node: Node):
    kernel = list(node.attr("kernel_shape"))
    n = len(kernel)
    strides = list(node.attr("strides") or [1] * n)
    begins, ends = fixed_pads(node.attr("pads"), n)

    def unpool(xs):
        x, idx = xs[0], xs[1]
        spatial = [(s - 1) * st + k - b - e for s, st, k, b, e in
                   zip(x.shape[2:], strides, kernel, begins, ends)]
        shape = list(x.shape[:2]) + spatial
        # MaxPool's indices address the whole flattened tensor, so one flat scatter does it.
        y = torch.zeros(math.prod(shape), dtype=x.dtype, device=x.device)
        y = y.scatter(0, idx.reshape(-1).to(x.device), x.reshape(-1)).reshape(shape)
        if len(xs) > 2 and xs[2] is not None:
            # A larger output_shape extends the inferred one with zeros at the end.
            target = [int(v) for v in xs[2].tolist()]
            y = pad_input(y, [0] * n, [t - s for t, s in zip(target[2:], spatial)])
        return [y]
    return unpool
