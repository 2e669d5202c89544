"""Linear quantization: QuantizeLinear and DequantizeLinear (per tensor, per axis, blocked)."""

from __future__ import annotations

import torch

from placer.measure.kernels.dtypes import torch_dtype
from placer.measure.kernels.registry import Node, register

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
        xf = x.to(torch.float32) if x.dtype != torch.int32 else x.to(torch.float64)
        if zp is not None:
            xf = xf - _broadcast(zp, x, axis, block).to(xf.dtype)
        return [(xf * s.to(xf.dtype)).to(scale.dtype)]
    return dq


@register("QuantizeLinear", since=10)
def _quantize(node: Node):
    axis, block = node.attr("axis", 1), node.attr("block_size", 0)
    out_attr = node.attr("output_dtype", 0)

    def q(xs):
        x, scale = xs[0], xs[1]
        zp = xs[2] if len(xs) > 2 else None
        dtype = zp.dtype if zp is not None else (torch_dtype(out_attr) if out_attr else torch.uint8)
        if dtype not in _RANGES:
            raise NotImplementedError(f"QuantizeLinear to {dtype}")
        lo, hi = _RANGES[dtype]
        s = _broadcast(scale, x, axis, block)
        # Round half to even, as ONNX specifies; computed in float32 like the reference.
        y = torch.round(x.to(torch.float32) / s.to(torch.float32))
        if zp is not None:
            y = y + _broadcast(zp, x, axis, block).to(torch.float32)
        return [y.clamp(lo, hi).to(dtype)]
    return q
