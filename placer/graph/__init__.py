"""ONNX loading, shapes, `OpGraph` and grouping.

    load_graph("model.onnx", {"x": (1, 3, 224, 224)}) -> OpGraph   (placer.graph.load)
    parse_input_shapes(["x=1x3x224x224"])             -> {"x": (1, 3, 224, 224)}
    graph_sha256(model_proto)                         -> the hash placements refer to
"""

from placer.graph.opgraph import OpGraph, OpNode, TensorInfo
from placer.graph.load import graph_sha256, load_graph, parse_input_shapes  # noqa: E402  (after the data types)

__all__ = ["OpGraph", "OpNode", "TensorInfo", "graph_sha256", "load_graph", "parse_input_shapes"]
