"""Kernels that make tensors: Constant, ConstantOfShape, Range, EyeLike.

They make their outputs on the CPU (they have no input to follow, or only shape-like ones);
a data input meeting them on another device is moved there by `BoundKernel`.
"""

from __future__ import annotations

import numpy as np
import torch

from placer.kernels.dtypes import to_torch, torch_dtype
from placer.kernels.registry import Node, register


@register("Constant", since=1)
def _constant(node: Node):
    a = node.attrs
    if "value" in a:
        value = to_torch(a["value"])
    elif "value_float" in a:
        value = torch.tensor(a["value_float"], dtype=torch.float32)
    elif "value_floats" in a:
        value = torch.tensor(list(a["value_floats"]), dtype=torch.float32)
    elif "value_int" in a:
        value = torch.tensor(a["value_int"], dtype=torch.int64)
    elif "value_ints" in a:
        value = torch.tensor(list(a["value_ints"]), dtype=torch.int64)
    else:
        raise NotImplementedError(f"Constant with attributes {sorted(a)}")
    # The same tensor every call: kernels never write into their inputs.
    return lambda xs: [value]


@register("ConstantOfShape", since=9, host_inputs=(0,))
def _constant_of_shape(node: Node):
    value = node.attr("value")
    fill = to_torch(value).reshape(-1)[0] if value is not None else torch.tensor(0.0)
    fill_value, dtype = fill.item(), fill.dtype

    def cos(xs):
        shape = [int(v) for v in xs[0].reshape(-1).tolist()]
        return [torch.full(shape, fill_value, dtype=dtype)]
    return cos


@register("Range", since=11, host_inputs=(0, 1, 2))
def _range(node: Node):
    def range_(xs):
        start, limit, delta = (x.reshape(-1)[0] for x in xs)
        dtype = start.dtype
        n = max(int(np.ceil((limit.item() - start.item()) / delta.item())), 0)
        # arange(n) * delta + start reproduces ONNX's definition exactly, also for floats.
        return [(torch.arange(n, dtype=dtype) * delta + start).to(dtype)]
    return range_


@register("EyeLike", since=9)
def _eyelike(node: Node):
    k = node.attr("k", 0)
    dtype_attr = node.attr("dtype")

    def eye(xs):
        x = xs[0]
        dtype = torch_dtype(dtype_attr) if dtype_attr is not None else x.dtype
        rows, cols = x.shape
        return [_eye(rows, cols, k, dtype, x.device)]
    return eye


def _eye(rows: int, cols: int, k: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    r = torch.arange(rows, device=device).unsqueeze(1)
    c = torch.arange(cols, device=device).unsqueeze(0)
    return (c - r == k).to(dtype)
