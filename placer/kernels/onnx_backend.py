"""An `onnx.backend.base.Backend` over the reference interpreter, so that the ONNX backend test
suite (`onnx.backend.test`) can check the torch kernels op by op.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from placer.errors import PlacerError
from placer.kernels import unsupported_ops
from placer.kernels.reference import run_model


class TorchKernelsRep(BackendRep):
    """A prepared model: `run` feeds the graph inputs in order and returns the graph outputs."""

    def __init__(self, model: onnx.ModelProto, device: str):
        self.model = model
        self.device = device
        initializers = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in initializers]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run on `inputs` (a list in graph-input order, a dict, or one array)."""
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = dict(zip(self.input_names, inputs))
        result = run_model(self.model, feeds, device=self.device)
        return tuple(result.values())


class TorchKernelsBackend(Backend):
    """The project's ONNX backend: placer's torch kernels run by the reference interpreter."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        """True when every op of `model` has a kernel."""
        return not unsupported_ops(model)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> TorchKernelsRep:
        """Check the model and bind it to a device ('CPU' or 'CUDA[:N]')."""
        super().prepare(model, device, **kwargs)
        return TorchKernelsRep(model, _torch_device(device))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Prepare and run once."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[np.ndarray], device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, ...]] | None = None,
                 **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run a single node by wrapping it in a one-node model."""
        names = [n for n in node.input if n]
        graph = onnx.helper.make_graph(
            [node], "node",
            [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in names],
            [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None)
             for n in node.output if n])
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        return TorchKernelsRep(model, _torch_device(device)).run(list(inputs))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """CPU always; CUDA when torch sees a GPU."""
        import torch

        kind = onnx.backend.base.Device(device).type
        if kind == onnx.backend.base.DeviceType.CPU:
            return True
        return kind == onnx.backend.base.DeviceType.CUDA and torch.cuda.is_available()


def _torch_device(device: str) -> str:
    d = onnx.backend.base.Device(device)
    if d.type == onnx.backend.base.DeviceType.CPU:
        return "cpu"
    if d.type == onnx.backend.base.DeviceType.CUDA:
        return f"cuda:{d.device_id or 0}"
    raise PlacerError(f"unknown backend device {device!r}; use CPU or CUDA")


prepare = TorchKernelsBackend.prepare
run_model_backend = TorchKernelsBackend.run_model
supports_device = TorchKernelsBackend.supports_device
