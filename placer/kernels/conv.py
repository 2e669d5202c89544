"""Convolutions: Conv and ConvTranspose (1-D, 2-D, 3-D; groups, dilations, auto_pad)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from placer.kernels._padding import fixed_pads, pad_input, same_pads, split_same
from placer.kernels.registry import Node, register

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
                begin, end = split_same(auto_pad, total)
                begins.append(begin)
                ends.append(end)
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


@register("DeformConv", since=19)
def _deform_conv(node: Node):
    """Deformable convolution: bilinear samples at offset positions (zero outside the input),
    optionally scaled by a mask, then one grouped matrix product with the weights."""
    group, offset_group = node.attr("group", 1), node.attr("offset_group", 1)
    a_kernel, a_pads, a_strides, a_dil = (node.attr("kernel_shape"), node.attr("pads"),
                                          node.attr("strides"), node.attr("dilations"))

    def deform(xs):
        xs = list(xs) + [None] * (5 - len(xs))
        x, w, offset, b, mask = xs[:5]
        N, C, H, W = x.shape
        oc, kh, kw = w.shape[0], w.shape[2], w.shape[3]
        if a_kernel:
            kh, kw = a_kernel
        sh, sw = a_strides or (1, 1)
        dh, dw = a_dil or (1, 1)
        ph, pw = (a_pads or (0, 0, 0, 0))[:2]
        oh, ow = offset.shape[2], offset.shape[3]
        K, G = kh * kw, offset_group
        dev, dt = x.device, x.dtype
        # Base sampling position of kernel tap (i, j) for output (y, x), in input pixels.
        ki = torch.arange(kh, device=dev, dtype=dt).repeat_interleave(kw) * dh      # (K,)
        kj = torch.arange(kw, device=dev, dtype=dt).repeat(kh) * dw
        oy = torch.arange(oh, device=dev, dtype=dt) * sh - ph
        ox = torch.arange(ow, device=dev, dtype=dt) * sw - pw
        off = offset.reshape(N, G, K, 2, oh, ow)
        py = ki.reshape(1, 1, K, 1, 1) + oy.reshape(1, 1, 1, oh, 1) + off[:, :, :, 0]
        px = kj.reshape(1, 1, K, 1, 1) + ox.reshape(1, 1, 1, 1, ow) + off[:, :, :, 1]
        # Bilinear sampling with zero outside the input, weights taken straight from the positions
        # (grid_sample's normalised coordinates would add rounding to exact integer positions).
        y0, x0 = py.floor(), px.floor()
        ly, lx = py - y0, px - x0
        flat = x.reshape(N, G, C // G, H * W)
        sampled = torch.zeros(N, G, C // G, K * oh * ow, dtype=dt, device=dev)
        for cy, wy in ((y0, 1 - ly), (y0 + 1, ly)):
            for cx, wx in ((x0, 1 - lx), (x0 + 1, lx)):
                inside = (cy >= 0) & (cy <= H - 1) & (cx >= 0) & (cx <= W - 1)
                idx = (cy.clamp(0, H - 1) * W + cx.clamp(0, W - 1)).long().reshape(N, G, 1, -1)
                weight = torch.where(inside, wy * wx, torch.zeros_like(wy)).reshape(N, G, 1, -1)
                sampled = sampled + torch.gather(flat, 3, idx.expand(N, G, C // G, idx.shape[-1])) * weight
        sampled = sampled.reshape(N, G, C // G, K, oh, ow)
        if mask is not None:
            sampled = sampled * mask.reshape(N, G, 1, K, oh, ow)
        cols = sampled.reshape(N, group, (C // group) * K, oh * ow)
        wg = w.reshape(group, oc // group, (C // group) * K)
        y = torch.einsum("gok,ngkl->ngol", wg, cols).reshape(N, oc, oh, ow)
        if b is not None:
            y = y + b.reshape(1, -1, 1, 1)
        return [y]
    return deform
