"""Convolutions: Conv and ConvTranspose (1-D, 2-D, 3-D; groups, dilations, auto_pad)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from placer.measure.kernels._padding import fixed_pads, pad_input, same_pads
from placer.measure.kernels.registry import Node, register

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@register("Conv", since=1)
def _conv(node: Node):
    auto_pad = node.attr("auto_pad", "NOTSET")
    group = node.attr("group", 1)
    strides0, dil0, pads0, kshape0 = (node.attr("strides"), node.attr("dilations"),
                                      node.attr("pads"), node.attr("kernel_shape"))
    cache: dict[int, tuple] = {}

    def setup(n: int):
        # Attribute defaults depend on the rank, known only from the first weight seen.
        strides = list(strides0 or [1] * n)
        dil = list(dil0 or [1] * n)
        begins, ends = fixed_pads(pads0, n)
        symmetric = auto_pad in ("NOTSET", "VALID") and begins == ends
        padding = begins if auto_pad == "NOTSET" else [0] * n
        return strides, dil, begins, ends, symmetric, padding

    def conv(xs):
        x, w = xs[0], xs[1]
        b = xs[2] if len(xs) > 2 else None
        n = w.dim() - 2
        if n not in cache:
            cache[n] = setup(n)
        strides, dil, begins, ends, symmetric, padding = cache[n]
        if not symmetric:
            if auto_pad not in ("NOTSET", "VALID"):
                kernel = kshape0 or list(w.shape[2:])
                begins, ends = same_pads(auto_pad, x.shape[2:], kernel, strides, dil)
            x = pad_input(x, begins, ends)
            padding = [0] * n
        return [_CONV[n](x, w, b, strides, padding, dil, group)]
    return conv


@register("ConvTranspose", since=1)
def _conv_transpose(node: Node):
    auto_pad = node.attr("auto_pad", "NOTSET")
    group = node.attr("group", 1)
    a_strides, a_dil, a_pads = node.attr("strides"), node.attr("dilations"), node.attr("pads")
    a_outpad, a_outshape, a_kernel = (node.attr("output_padding"), node.attr("output_shape"),
                                      node.attr("kernel_shape"))

    def conv_t(xs):
        x, w = xs[0], xs[1]
        b = xs[2] if len(xs) > 2 else None
        n = w.dim() - 2
        strides = list(a_strides or [1] * n)
        dil = list(a_dil or [1] * n)
        outpad = list(a_outpad or [0] * n)
        kernel = list(a_kernel or w.shape[2:])
        begins, ends = fixed_pads(a_pads, n)
        sizes = x.shape[2:]
        if a_outshape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            target = (list(a_outshape)[-n:] if a_outshape
                      else [sizes[i] * strides[i] for i in range(n)])
            begins, ends = [], []
            for i in range(n):
                total = (strides[i] * (sizes[i] - 1) + outpad[i] + (kernel[i] - 1) * dil[i] + 1
                         - target[i])
                half = total // 2
                if auto_pad == "SAME_UPPER":
                    begins.append(half)
                    ends.append(total - half)
                else:
                    begins.append(total - half)
                    ends.append(half)
        elif auto_pad == "VALID":
            begins, ends = [0] * n, [0] * n
        if begins == ends and all(min(s, d) > o for s, d, o in zip(strides, dil, outpad)):
            return [_CONV_T[n](x, w, b, strides, begins, outpad, group, dil)]
        # General case: the full transposed convolution, then crop/extend each end (F.pad with
        # negative amounts crops); output_padding rows lie past the full output, so they are 0.
        y = _CONV_T[n](x, w, None, strides, 0, 0, group, dil)
        y = pad_input(y, [-v for v in begins], [o - e for o, e in zip(outpad, ends)])
        if b is not None:
            y = y + b.reshape([1, -1] + [1] * n)
        return [y]
    return conv_t
