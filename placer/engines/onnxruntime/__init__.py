"""Engines that run placements: ONNX Runtime sessions per device partition (`OrtEngine`,
`OrtPlacement`) and the runner of split models users deploy (`load`)."""

from placer.engines.onnxruntime.runner import SplitRunner, load

__all__ = ["SplitRunner", "load"]
