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
}


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
    return torch.from_numpy(np.array(array, copy=True, order="C"))


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A torch tensor as a numpy array (bfloat16, which numpy lacks, becomes float32)."""
    t = tensor.detach()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return np.array(t.cpu().numpy(), copy=True)
