"""Engines that run placements: ONNX Runtime sessions per device partition (`OrtMeasurer`,
`OrtPlacement`) and the runner of split models users deploy (`load`)."""

from placer.runtime.runner import SplitRunner, load

__all__ = ["SplitRunner", "load"]
