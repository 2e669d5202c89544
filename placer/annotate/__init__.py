"""Placements in ONNX files: write them as annotations, read them back, check them against a
graph, split an annotated model into per-device stage models, summarise and draw them."""

from placer.annotate.read import read_placement
from placer.annotate.resolve import parse_device_map, resolve_placement
from placer.annotate.write import apply_placement, ort_layer_settings

__all__ = ["apply_placement", "ort_layer_settings", "parse_device_map", "read_placement",
           "resolve_placement"]
