"""The model zoo: torch definitions of the field's benchmark graphs, exported to ONNX on demand.

    graphs.names()                          -> ['inception_v3', ...]   (exported from torch)
    graphs.onnx_names()                     -> ['llama', 'llama2_7b', 'llama2_70b']   (built as ONNX)
    graphs.build_model('rnnlm', batch=4)    -> (eval-mode torch module, example inputs)
    graphs.export('inception_v3', 'i.onnx') -> Path of a checked, deterministic ONNX file
    graphs.resolve('inception_v3.onnx')     -> an existing file, or the zoo model from the cache
"""

from graphs.cache import cache_dir, resolve
from graphs.export import OPSET, export, export_model
from graphs.registry import build_model, get, input_shapes, names, onnx_names, parameter_count
from graphs.spec import ZooModel

__all__ = ["OPSET", "ZooModel", "build_model", "cache_dir", "export", "export_model", "get",
           "input_shapes", "names", "onnx_names", "parameter_count", "resolve"]
