"""Linear quantization: QuantizeLinear and DequantizeLinear (per tensor, per axis, blocked)."""

from __future__ import annotations

import torch

from placer.kernels.dtypes import FLOAT8, to_float8, torch_dtype
from placer.kernels.registry import Node, register

_RANGES = {torch.uint8: (0, 255), torch.int8: (-128, 127), torch.int16: (-32768, 32767),
           torch.uint16: (0, 65535), torch.int32: (-2**31, 2**31 - 1)}


def _broadcast(param: torch.Tensor, x: torch.Tensor, axis: int, block: int) -> torch.Tensor:
    """Scale or zero point shaped to broadcast against x (per tensor, per axis or per block)."""
    if param.dim() == 0 or param.numel() == 1 and x.dim() <= 1 and not block:
        return param.reshape(())
    a = axis + x.dim() if axis < 0 else axis
    if block:
        param = param.repeat_interleave(block, a).narrow(a, 0, x.shape[a])
        return param
    shape = [1] * x.dim()
    shape[a] = param.numel()
    return param.reshape(shape)


@register("DequantizeLinear", since=10)
def _dequantize(node: Node):
    axis, block = node.attr("axis", 1), node.attr("block_size", 0)

    def dq(xs):
        x, scale = xs[0], xs[1]
        zp = xs[2] if len(xs) > 2 else None
        s = _broadcast(scale, x, axis, block)
        wide = x.dtype == torch.int32 or scale.dtype == torch.float64
        xf = x.to(torch.float64 if wide else torch.float32)
        if zp is not None:
            xf = xf - _broadcast(zp, x, axis, block).to(xf.dtype)
        return [(xf * s.to(xf.dtype)).to(scale.dtype)]
    return dq


@register("QuantizeLinear", since=10)
def _quantize(node: Node):
    axis, block = node.attr("axis", 1), node.attr("block_size", 0)
    out_attr, saturate = node.attr("output_dtype", 0), bool(node.attr("saturate", 1))

    def q(xs):
        x, scale = xs[0], xs[1]
        zp = xs[2] if len(xs) > 2 else None
        dtype = zp.dtype if zp is not None else (torch_dtype(out_attr) if out_attr else torch.uint8)
        s = _broadcast(scale, x, axis, block)
        if dtype in FLOAT8:
            y = x.to(torch.float32) / s.to(torch.float32)
            if zp is not None:
                y = y + _broadcast(zp, x, axis, block).to(torch.float32)
            return [to_float8(y, dtype, saturate)]
        if dtype not in _RANGES:
            raise NotImplementedError(f"QuantizeLinear to {dtype}")
        lo, hi = _RANGES[dtype]
        # Round half to even, as ONNX specifies; computed in float32 like the reference.
        y = torch.round(x.to(torch.float32) / s.to(torch.float32))
        if zp is not None:
            y = y + _broadcast(zp, x, axis, block).to(torch.float32)
        return [y.clamp(lo, hi).to(dtype)]
    return q


def _centered(x: torch.Tensor, zp: torch.Tensor | None, axis_shape: list[int] | None = None
              ) -> torch.Tensor:
    """x - zero_point in float64: exact for 8/16-bit data, and runs on every device."""
    xd = x.to(torch.float64)
    if zp is None:
        return xd
    z = zp.to(torch.float64)
    if axis_shape is not None and z.numel() > 1:
        z = z.reshape(axis_shape)
    return xd - z


def _requantize(acc: torch.Tensor, multiplier: torch.Tensor, zp: torch.Tensor | None,
                dtype: torch.dtype) -> torch.Tensor:
    lo, hi = _RANGES[dtype]
    y = torch.round(acc * multiplier)
    if zp is not None:
        y = y + zp.to(torch.float64)
    return y.clamp(lo, hi).to(dtype)


@register("MatMulInteger", since=10)
def _matmul_integer(node: Node):
    def mmi(xs):
        xs = list(xs) + [None] * (4 - len(xs))
        a, b, azp, bzp = xs[:4]
        # A per-row zero point of A is (M,): it subtracts along A's rows.
        ad = _centered(a, azp, [-1, 1] if azp is not None and azp.numel() > 1 else None)
        return [torch.matmul(ad, _centered(b, bzp)).round().to(torch.int32)]
    return mmi


@register("ConvInteger", since=10)
def _conv_integer(node: Node):
    from placer.kernels.conv import _conv

    conv = _conv(node)

    def ci(xs):
        xs = list(xs) + [None] * (4 - len(xs))
        x, w, xzp, wzp = xs[:4]
        wd = _centered(w, wzp, [-1] + [1] * (w.dim() - 1))
        return [conv([_centered(x, xzp), wd])[0].round().to(torch.int32)]
    return ci


@register("QLinearMatMul", since=10)
def _qlinear_matmul(node: Node):
    def qmm(xs):
        a, a_s, azp, b, b_s, bzp, y_s, yzp = xs
        acc = torch.matmul(_centered(a, azp), _centered(b, bzp))
        mult = (a_s.to(torch.float64) * b_s.to(torch.float64) / y_s.to(torch.float64))
        return [_requantize(acc, mult, yzp, yzp.dtype)]
    return qmm


@register("QLinearConv", since=10)
def _qlinear_conv(node: Node):
    from placer.kernels.conv import _conv

    conv = _conv(node)

    def qconv(xs):
        xs = list(xs) + [None] * (9 - len(xs))
        x, x_s, xzp, w, w_s, wzp, y_s, yzp, bias = xs[:9]
        n = w.dim() - 2
        wd = _centered(w, wzp, [-1] + [1] * (w.dim() - 1))
        acc = conv([_centered(x, xzp), wd, None if bias is None else bias.to(torch.float64)])[0]
        ws = w_s.to(torch.float64)
        if ws.numel() > 1:
            ws = ws.reshape([1, -1] + [1] * n)
        mult = x_s.to(torch.float64) * ws / y_s.to(torch.float64)
        return [_requantize(acc, mult, yzp, yzp.dtype)]
    return qconv


@register("DynamicQuantizeLinear", since=11)
def _dynamic_quantize(node: Node):
    def dql(xs):
        x = xs[0].to(torch.float32)
        lo = torch.clamp(x.min(), max=0.0)
        hi = torch.clamp(x.max(), min=0.0)
        scale = (hi - lo) / 255.0
        safe = torch.where(scale == 0, torch.ones_like(scale), scale)
        zp = torch.round(-lo / safe).clamp(0, 255)
        y = (torch.round(x / safe) + zp).clamp(0, 255).to(torch.uint8)
        return [y, scale, zp.to(torch.uint8)]
    return dql
