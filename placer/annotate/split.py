"""Split a placed model into one ONNX model per stage (see `placer.annotate.stages`), chained by
a small JSON file, so each device's part can be deployed and run on its own.

Each stage model declares its inputs and outputs explicitly, carries only the weights its nodes
read, and passes onnx.checker. Running the stages in order, feeding each the tensors named in
the JSON, gives the original model's outputs (`placer.annotate.chain.run_split` does that).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from placer.annotate.stages import Stage, plan_stages
from placer.annotate.write import node_names, save_model
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement

log = logging.getLogger(__name__)

SPLIT_FORMAT = "placer.split/1"
INDEX_FILE = "split.json"


@dataclass
class StageModel:
    """A stage and the standalone ONNX model that computes it."""

    stage: Stage
    model: onnx.ModelProto

    @property
    def file_name(self) -> str:
        """e.g. ``stage02_cuda_0.onnx``: run order first, then the device."""
        device = re.sub(r"[^A-Za-z0-9]+", "_", self.stage.device).strip("_")
        return f"stage{self.stage.index:02d}_{device}.onnx"


def split_model(model: onnx.ModelProto, placement: Placement, graph: OpGraph) -> list[StageModel]:
    """One model per stage of `placement` over `graph` (loaded from `model`), in run order."""
    names = node_names(model, graph)
    proto_of = dict(zip(names, model.graph.node))
    value_types = _value_types(model, graph)
    weights = {t.name: t for t in model.graph.initializer}
    result = []
    # A Constant weight is copied into every stage that reads it, as an initializer is; a weight
    # folded from a constant-only subgraph (Constant -> Cast -> ...) goes in as its value
    constant_of = {tensor: name for name, tensor in graph.constants.items()
                   if proto_of[name].op_type == "Constant" and list(proto_of[name].output) == [tensor]}
    for stage in plan_stages(graph, placement):
        nodes = [_named(proto_of[constant_of[t]], constant_of[t]) for t in stage.initializers if t in constant_of]
        nodes += [_named(proto_of[n], n) for n in stage.nodes]
        sub = helper.make_graph(
            nodes, f"{model.graph.name or 'graph'}_stage{stage.index}",
            inputs=[value_types[t] for t in stage.inputs],
            outputs=[value_types[t] for t in stage.outputs],
            initializer=[weights[t] if t in weights else numpy_helper.from_array(graph.initializer_array(t), t)
                         for t in stage.initializers if t not in constant_of])
        stage_model = helper.make_model(sub, opset_imports=list(model.opset_import),
                                        producer_name="placer split",
                                        functions=list(model.functions))
        stage_model.ir_version = model.ir_version
        helper.set_model_props(stage_model, {"placer.stage": str(stage.index), "placer.device": stage.device})
        result.append(StageModel(stage, stage_model))
    return result


def write_split(model: onnx.ModelProto, placement: Placement, graph: OpGraph, folder: str | Path) -> Path:
    """Write the stage models and `split.json` (their order, devices and tensors) into `folder`;
    returns the JSON file's path. Every stage model is checked with onnx.checker."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise PlacerError(f"--split {folder} is a file; give a folder to write the stage models into")
    folder.mkdir(parents=True, exist_ok=True)
    stages = split_model(model, placement, graph)
    for stage_model in stages:
        save_model(stage_model.model, folder / stage_model.file_name)
    index = {
        "format": SPLIT_FORMAT,
        "graph": {"sha256": graph.sha256},
        "devices": list(placement.devices),
        "inputs": [v.name for v in model.graph.input if v.name not in {t.name for t in model.graph.initializer}],
        "outputs": [v.name for v in model.graph.output],
        "stages": [{"index": s.stage.index, "file": s.file_name, "device": s.stage.device,
                    "nodes": len(s.stage.nodes), "inputs": s.stage.inputs, "outputs": s.stage.outputs}
                   for s in stages],
    }
    path = folder / INDEX_FILE
    path.write_text(json.dumps(index, indent=2) + "\n")
    log.info("wrote %d stage models to %s", len(stages), folder)
    return path


def _named(node: onnx.NodeProto, name: str) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.name = name
    return copy


def _value_types(model: onnx.ModelProto, graph: OpGraph) -> dict[str, onnx.ValueInfoProto]:
    """Type and shape of every tensor, as the file declares or ONNX infers them (symbolic
    dimensions kept); a tensor inference cannot shape falls back to the graph's bound shape."""
    try:
        inferred = shape_inference.infer_shapes(model).graph
    except Exception as exc:  # inference is a nicety here; a model it trips on still splits
        log.info("shape inference failed on the model (%s); stage tensors get dtypes only", exc)
        inferred = model.graph
    types: dict[str, onnx.ValueInfoProto] = {}
    for value in list(inferred.value_info) + list(inferred.input) + list(inferred.output):
        tt = value.type.tensor_type
        if value.type.HasField("tensor_type") and tt.elem_type and tt.HasField("shape"):
            types[value.name] = value
    # What inference leaves without a shape (a Loop's outputs) gets the graph's bound one.
    for name, info in graph.tensors.items():
        if name not in types:
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype))
            types[name] = helper.make_tensor_value_info(name, elem, list(info.shape))
    return _Missing(types)


class _Missing(dict):
    """A name -> ValueInfo table whose missing entries are a PlacerError, not a KeyError."""

    def __missing__(self, name: str) -> onnx.ValueInfoProto:
        raise PlacerError(f"cannot tell the type of tensor {name!r} to declare it between stages; "
                          "give the model's inputs static shapes with --input-shape")
