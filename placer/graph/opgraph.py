"""`OpGraph`: an ONNX model as plain data — a networkx DiGraph plus per-op features.

Built by `placer.graph.load_graph`; read by every other pass (grouping, executor, placers,
annotation). Nothing here runs anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

import networkx as nx
import numpy as np
import onnx

T = TypeVar("T")


def constant_devices(constants: Mapping[str, str], consumers: Mapping[str, list[str]],
                     nodes: Mapping[str, T]) -> dict[str, T]:
    """The device of each Constant node (node -> tensor in `constants`) under a node -> device map
    (or any node -> value map): its first reader's (in topological order), or the first node's
    for a Constant read by none."""
    if not constants or not nodes:
        return {}
    fallback = next(iter(nodes.values()))
    return {name: nodes.get(next(iter(consumers.get(tensor, ())), ""), fallback)
            for name, tensor in constants.items()}


@dataclass(frozen=True)
class TensorInfo:
    """A tensor's static shape and dtype (numpy dtype name, e.g. 'float32')."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @cached_property   # read millions of times in a large plan's simulation
    def numel(self) -> int:
        return math.prod(int(d) for d in self.shape)   # exact: int64 would wrap on an absurd --input-shape

    @cached_property
    def nbytes(self) -> int:
        return self.numel * np.dtype(self.dtype).itemsize


@dataclass
class OpNode:
    """One ONNX node with the features placement needs."""

    name: str                        # ONNX name, or a stable generated one when the file has none
    op_type: str
    domain: str                      # '' for the default ONNX domain
    opset: int                       # opset version of the node's domain in this model
    inputs: tuple[str, ...]          # tensor names; '' marks an omitted optional input; then
                                     # `implicit_inputs` (see `structure.node_inputs`)
    outputs: tuple[str, ...]
    proto: onnx.NodeProto            # the node itself (attributes, subgraphs)
    output_info: tuple[TensorInfo, ...] = ()
    param_bytes: int = 0             # bytes of the initializers this node reads
    flops: float = 0.0               # estimated floating-point operations of one forward step
    device_kinds: frozenset[str] = frozenset({"cpu", "cuda"})  # device kinds that can run it
    # Tensors the node's subgraphs (If/Loop/Scan bodies) read from the enclosing graph that the
    # file does not list as its inputs: real inputs (their producers run first, their values
    # must reach the node's device), the last entries of `inputs`.
    implicit_inputs: tuple[str, ...] = ()
    # What of a control-flow node's cost the data decides ('the branch taken', 'its trip count'):
    # its FLOPs are an estimate, and a profile times what the profiling inputs did.
    data_dependence: str = ""

    @property
    def output_shapes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(t.shape for t in self.output_info)

    @property
    def output_bytes(self) -> int:
        return sum(t.nbytes for t in self.output_info)


@dataclass
class OpGraph:
    """The whole model: nodes in a deterministic topological order, tensors, and the DiGraph.

    `dag` has one vertex per node name (attribute ``op``: the `OpNode`); an edge u->v carries
    ``tensors`` (names of the tensors u produces that v reads) and ``bytes`` (their total size).
    Graph inputs and initializers are not vertices: see `inputs` and `initializers`.
    """

    model: onnx.ModelProto                 # names filled in, dynamic dims bound, shapes inferred
    nodes: dict[str, OpNode]               # in topological order
    tensors: dict[str, TensorInfo]         # every tensor: inputs, initializers, node outputs
    inputs: list[TensorInfo]               # graph inputs a caller must feed (bound shapes)
    outputs: list[TensorInfo]
    initializers: dict[str, TensorInfo]    # weights and constants stored in the file
    opsets: dict[str, int]                 # domain -> opset version
    sha256: str                            # identity of the file's graph that placements refer to
    dag: nx.DiGraph = field(default_factory=nx.DiGraph)
    source: str = ""                       # where it was loaded from, for messages
    # Floating-point Constant nodes of the file, loaded as initializers (node name -> tensor):
    # weights, not placement decisions; each follows its first reader (`constant_devices`).
    constants: dict[str, str] = field(default_factory=dict)
    # The user's sample inputs (--inputs, `inputs=`), checked against `inputs`: every run of the
    # graph is fed them (the shapes' real run, the profile, every measured step), the inputs they
    # leave out generated (`placer.graph.feeds.step_feeds`). Their values may decide the work.
    sample_inputs: dict[str, np.ndarray] = field(default_factory=dict)
    # Tensors whose shapes only a real run on those inputs found (an If's branch, a Loop's count).
    run_shapes: tuple[str, ...] = ()
    # What it was loaded from: the file's path (external data beside it, read late when loading left
    # it there: `read_weights`) or the caller's ModelProto; for `legacy_sha256` too.
    origin: str | onnx.ModelProto | None = None
    # Why the weights loading left unread cannot be read later (their files missing), in one line; else "".
    weights_note: str = ""

    @property
    def order(self) -> list[str]:
        """Node names in the deterministic topological order."""
        return list(self.nodes)

    @cached_property
    def producer(self) -> dict[str, str]:
        """Tensor name -> name of the node that produces it."""
        return {t: n.name for n in self.nodes.values() for t in n.outputs if t}

    @cached_property
    def consumers(self) -> dict[str, list[str]]:
        """Tensor name -> names of the nodes that read it, in topological order."""
        result: dict[str, list[str]] = {}
        for node in self.nodes.values():
            for t in dict.fromkeys(node.inputs):
                if t:
                    result.setdefault(t, []).append(node.name)
        return result

    def constant_devices(self, nodes: Mapping[str, T]) -> dict[str, T]:
        """Each Constant weight's device (or stage, ...) under a node -> device map: its first reader's."""
        return constant_devices(self.constants, self.consumers, nodes)

    def initializer_array(self, name: str) -> np.ndarray:
        """The value of an initializer. Only it is converted: a rule reading a shape constant of a
        70B model must not read its weights. One left unread in its file (`load_graph(weights=
        "shapes")`) is read first, with every other such weight: asking for a weight's value is
        what a real run does, which needs them all."""
        from onnx import external_data_helper, numpy_helper

        array = self._arrays.get(name)
        if array is None:
            tensor = self._initializer_protos[name]
            if external_data_helper.uses_external_data(tensor):
                self.read_weights()
            array = self._arrays[name] = numpy_helper.to_array(tensor)
        return array

    @cached_property
    def _arrays(self) -> dict[str, np.ndarray]:
        return {}

    @cached_property
    def _initializer_protos(self) -> dict[str, onnx.TensorProto]:
        return {t.name: t for t in self.model.graph.initializer}

    def read_weights(self) -> None:
        """Read into `model` the weights `load_graph(weights="shapes")` left in external data files,
        for what needs their values (a real run, a weight's value); a `PlacerError` when the files
        are not there."""
        from pathlib import Path

        from placer.graph.files import load_external_data

        if isinstance(self.origin, str):
            load_external_data(self.model, Path(self.origin))

    @cached_property
    def legacy_sha256(self) -> str | None:
        """The hash placer recorded for this graph before large weights were hashed by shape
        (`placer.graph.identity.legacy_graph_sha256`), or None when its weights cannot be read;
        computed on first use only: it reads every weight, one at a time."""
        from pathlib import Path

        from placer.errors import PlacerError
        from placer.graph.identity import legacy_graph_sha256
        from placer.graph.files import read_model

        if not isinstance(self.origin, str):
            return None if self.origin is None else legacy_graph_sha256(self.origin)
        try:
            return legacy_graph_sha256(read_model(self.origin, weights="shapes"), Path(self.origin).parent)
        except PlacerError:
            return None

    def is_named_by(self, recorded: str | None) -> bool:
        """Whether a graph hash recorded beside something made for a graph (a placement, a plan, a
        run, a profile) names this one: none recorded, this hash, or the one placer recorded before."""
        return not recorded or not self.sha256 or recorded == self.sha256 or recorded == self.legacy_sha256

    @property
    def total_flops(self) -> float:
        return sum(n.flops for n in self.nodes.values())

    @property
    def total_param_bytes(self) -> int:
        return sum(t.nbytes for t in self.initializers.values())
