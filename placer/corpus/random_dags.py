"""Layered random DAGs as in the placement literature (Placeto, GiPH): `depth` layers of up to
`width` ops, each reading 1 to `fan_in` tensors of the layers before it, as real ONNX models with
static shapes (so `load_graph` reads them as any user's file).

Two kinds: dense (MatMul, Add, Relu, Concat + a projection back) on [rows, hidden] tensors, and
convolutional (Conv 3x3, Add, Relu, Concat + a 1x1 Conv back) on [1, channels, size, size]
tensors. Every op's output keeps the layer's shape, so any tensor can feed any later op.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


@dataclass(frozen=True)
class DagSpec:
    """One random DAG's shape: what `random_dag` draws from."""

    kind: str        # "dense" or "conv"
    depth: int       # layers after the input
    width: int       # the most ops in a layer
    fan_in: int      # the most tensors an op reads
    size: int        # dense: hidden units; conv: channels
    rows: int        # dense: rows of the activations (a batch); conv: height and width

    @property
    def name(self) -> str:
        return f"dag-{self.kind}-d{self.depth}-w{self.width}-f{self.fan_in}-s{self.size}-r{self.rows}"


def draw_spec(rng: np.random.Generator, small: bool = False) -> DagSpec:
    """A spec with depth, width, fan-in and tensor sizes drawn over the ranges of the literature's
    synthetic graphs (about 100-400 ops); `small` keeps them to tens of ops."""
    kind = str(rng.choice(("dense", "conv")))
    depth = int(rng.integers(6, 13) if small else rng.integers(10, 41))
    width = int(rng.integers(3, 7) if small else rng.integers(3, 13))
    fan_in = int(rng.integers(1, 4))
    if kind == "dense":
        return DagSpec(kind, depth, width, fan_in, int(rng.choice((64, 128, 256, 512))),
                       int(rng.choice((64, 256, 1024, 4096))))
    return DagSpec(kind, depth, width, fan_in, int(rng.choice((16, 32, 64))), int(rng.choice((14, 28, 56))))


def random_dag(spec: DagSpec, seed: int) -> onnx.ModelProto:
    """The ONNX model of `spec`, its structure and weights drawn from `seed`."""
    rng = np.random.default_rng(seed)
    builder = _Builder(spec, rng)
    layers = [["input"]]
    for _ in range(spec.depth):
        previous = [t for layer in layers for t in layer]
        count = int(rng.integers(1, spec.width + 1))
        layer = []
        for _ in range(count):
            # read the layer just before (so depth is real) plus up to fan_in - 1 earlier tensors
            reads = [str(rng.choice(layers[-1]))]
            extra = int(rng.integers(0, spec.fan_in))
            if extra:
                reads += [str(t) for t in rng.choice(previous, size=min(extra, len(previous)), replace=False)]
            layer.append(builder.op(sorted(set(reads), key=reads.index)))
        layers.append(layer)
    # every tensor no op read becomes an output, so no op is dead
    read = {i for node in builder.nodes for i in node.input}
    outputs = [t for layer in layers[1:] for t in layer if t not in read]
    graph = helper.make_graph(builder.nodes, spec.name, [builder.value("input")],
                              [builder.value(t) for t in outputs], builder.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="placer.corpus.random_dags")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


class _Builder:
    """Appends ops of one spec's kind; every tensor has the spec's one activation shape."""

    def __init__(self, spec: DagSpec, rng: np.random.Generator) -> None:
        self.spec, self.rng = spec, rng
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.shape = [spec.rows, spec.size] if spec.kind == "dense" else [1, spec.size, spec.rows, spec.rows]

    def value(self, name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, self.shape)

    def _fresh(self, stem: str) -> str:
        return f"{stem}_{len(self.nodes)}"

    def _weight(self, shape: list[int]) -> str:
        name = f"w_{len(self.initializers)}"
        scale = 1.0 / np.sqrt(np.prod(shape[1:]) if len(shape) > 2 else shape[0])
        data = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.initializers.append(numpy_helper.from_array(data, name))
        return name

    def _project(self, x: str, width_in: int) -> str:
        """MatMul (dense) or Conv (conv) from `width_in` features back to the spec's size."""
        out = self._fresh("proj" if width_in != self.spec.size else "mm")
        s = self.spec.size
        if self.spec.kind == "dense":
            self.nodes.append(helper.make_node("MatMul", [x, self._weight([width_in, s])], [out], name=out))
        else:
            k = 1 if width_in != s else 3
            self.nodes.append(helper.make_node("Conv", [x, self._weight([s, width_in, k, k])], [out], name=out,
                                               pads=[k // 2] * 4))
        return out

    def op(self, reads: list[str]) -> str:
        """One op reading `reads`: a single read is a MatMul/Conv or a Relu; several are summed or
        concatenated (and projected back)."""
        if len(reads) == 1:
            if self.rng.random() < 0.7:
                return self._project(reads[0], self.spec.size)
            out = self._fresh("relu")
            self.nodes.append(helper.make_node("Relu", reads, [out], name=out))
            return out
        if self.rng.random() < 0.5:
            total = reads[0]
            for other in reads[1:]:
                out = self._fresh("add")
                self.nodes.append(helper.make_node("Add", [total, other], [out], name=out))
                total = out
            return total
        out = self._fresh("concat")
        self.nodes.append(helper.make_node("Concat", reads, [out], name=out, axis=1))
        return self._project(out, self.spec.size * len(reads))
