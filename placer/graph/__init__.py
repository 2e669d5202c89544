"""ONNX loading, shapes, `OpGraph` and grouping."""

from placer.graph.opgraph import OpGraph, OpNode, TensorInfo

__all__ = ["OpGraph", "OpNode", "TensorInfo"]
