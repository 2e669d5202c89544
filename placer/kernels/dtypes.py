"""ONNX element types <-> torch dtypes, and ONNX tensors -> torch tensors."""

from __future__ import annotations

import numpy as np
import onnx
import torch

from placer.errors import PlacerError

_ONNX_TO_TORCH: dict[int, torch.dtype] = {
    onnx.TensorProto.FLOAT: torch.float32,
    onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.FLOAT16: torch.float16,
    onnx.TensorProto.BFLOAT16: torch.bfloat16,
    onnx.TensorProto.INT8: torch.int8,
    onnx.TensorProto.INT16: torch.int16,
    onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.INT64: torch.int64,
    onnx.TensorProto.UINT8: torch.uint8,
    onnx.TensorProto.UINT16: torch.uint16,
    onnx.TensorProto.UINT32: torch.uint32,
    onnx.TensorProto.UINT64: torch.uint64,
    onnx.TensorProto.BOOL: torch.bool,
    onnx.TensorProto.COMPLEX64: torch.complex64,
    onnx.TensorProto.COMPLEX128: torch.complex128,
    onnx.TensorProto.FLOAT8E4M3FN: torch.float8_e4m3fn,
    onnx.TensorProto.FLOAT8E4M3FNUZ: torch.float8_e4m3fnuz,
    onnx.TensorProto.FLOAT8E5M2: torch.float8_e5m2,
    onnx.TensorProto.FLOAT8E5M2FNUZ: torch.float8_e5m2fnuz,
}

# numpy has no bfloat16 or float8: onnx represents them with ml_dtypes, torch natively.
# They cross between the two by reinterpreting the bits.
_ML_DTYPES = {"bfloat16": (torch.bfloat16, torch.uint16), "float8_e4m3fn": (torch.float8_e4m3fn, torch.uint8),
              "float8_e4m3fnuz": (torch.float8_e4m3fnuz, torch.uint8),
              "float8_e5m2": (torch.float8_e5m2, torch.uint8),
              "float8_e5m2fnuz": (torch.float8_e5m2fnuz, torch.uint8)}
_TORCH_TO_ML = {t: (name, bits) for name, (t, bits) in _ML_DTYPES.items()}


def torch_dtype(onnx_type: int) -> torch.dtype:
    """The torch dtype of an ONNX element type; PlacerError for types torch lacks (strings...)."""
    try:
        return _ONNX_TO_TORCH[onnx_type]
    except KeyError:
        name = onnx.TensorProto.DataType.Name(onnx_type) if onnx_type in onnx.TensorProto.DataType.values() else onnx_type
        raise PlacerError(f"element type {name} is not supported by the torch kernels; "
                          "re-export the model with float, integer or bool tensors") from None


def to_torch(array: np.ndarray | np.generic) -> torch.Tensor:
    """A numpy array as a torch tensor on the CPU (copied, so the array stays untouched)."""
    array = np.asarray(array)
    if array.dtype == object or array.dtype.kind in "SU":
        raise PlacerError("string tensors are not supported by the torch kernels; "
                          "re-export the model without string inputs")
    if array.dtype.name in _ML_DTYPES:
        dtype, bits = _ML_DTYPES[array.dtype.name]
        raw = np.array(array, copy=True, order="C").view(np.uint16 if bits == torch.uint16 else np.uint8)
        return torch.from_numpy(raw).view(dtype)
    return torch.from_numpy(np.array(array, copy=True, order="C"))


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A torch tensor as a numpy array (bfloat16 and float8 as onnx's ml_dtypes arrays)."""
    t = tensor.detach().cpu()
    if t.dtype in _TORCH_TO_ML:
        import ml_dtypes

        name, bits = _TORCH_TO_ML[t.dtype]
        return np.array(t.contiguous().view(bits).numpy().view(getattr(ml_dtypes, name)), copy=True)
    return np.array(t.numpy(), copy=True)


FLOAT8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz)


def to_float8(x: torch.Tensor, dtype: torch.dtype, saturate: bool = True) -> torch.Tensor:
    """Cast to a float8 type with ONNX's overflow rules (torch's own cast differs by type).

    saturate: out-of-range values and infinities become +-max; otherwise they become inf
    (e5m2) or NaN (the types without infinities).
    """
    xf = x.float()
    big = torch.finfo(dtype).max
    nan = torch.full_like(xf, float("nan"))
    if saturate:
        y = torch.clamp(xf, -big, big)
    else:
        over = xf.abs() > big
        y = torch.where(over, torch.sign(xf) * float("inf") if dtype == torch.float8_e5m2 else nan, xf)
    return y.to(dtype)
