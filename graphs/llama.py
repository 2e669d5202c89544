"""Llama: a Llama-2-shaped decoder (Touvron et al. 2023) built directly as ONNX, at any size.

Pre-norm blocks with RMSNorm, rotary position embeddings, grouped-query attention (each key-value head
serves heads / kv_heads query heads), a SwiGLU MLP (gate, up, down; no biases anywhere), a final RMSNorm
and an untied LM head. torch.onnx cannot export a 70B-parameter model on one machine, so the graph is
written node by node with `onnx.helper`.

Three zoo entries share the builder: `llama` (tiny, for tests), `llama2_7b` and `llama2_70b` (the
published shapes at their 4096-token context). A model whose float32 weights exceed `RANDOM_WEIGHT_BYTES`
gets no weights at all: each initializer is an external-data reference into one data file beside the model,
which the export creates sparse (zeros read back, no disk used) or leaves absent. Below that, weights are
seeded random values at scales that keep every activation O(1).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphs.spec import OnnxZooModel
from placer.errors import PlacerError

# Above this many bytes of weights, drawing random values would take minutes and more memory than the
# machine has; a shape to place needs none, so they are left as external references (zeros or absent).
RANDOM_WEIGHT_BYTES = 1_000_000_000

# External tensors start on page boundaries, so that readers can map them (the padding is sparse too).
ALIGN = 4096

NORM_EPS = 1e-5          # Llama 2's RMSNorm epsilon
ROPE_THETA = 10000.0     # Llama 2's rotary base


@dataclass(frozen=True)
class Options:
    """The tiny default: 2 layers, hidden 64, 4 query heads sharing 2 key-value heads."""

    batch: int = 1
    seq_len: int = 16
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    mlp: int = 160
    vocab: int = 256


def _shape(name: str, **defaults: int) -> type:
    """`Options` with the defaults of a published shape."""
    fields = [(key, int, dataclasses.field(default=value)) for key, value in defaults.items()]
    return dataclasses.make_dataclass(name, fields, bases=(Options,), frozen=True)


Llama2_7B = _shape("Llama2_7B", seq_len=4096, layers=32, hidden=4096, heads=32, kv_heads=32, mlp=11008, vocab=32000)
Llama2_70B = _shape("Llama2_70B", seq_len=4096, layers=80, hidden=8192, heads=64, kv_heads=8, mlp=28672, vocab=32000)


def _check(o: Options) -> None:
    if o.hidden % o.heads or (o.hidden // o.heads) % 2:
        raise PlacerError(f"llama: hidden {o.hidden} must split into {o.heads} heads of an even size (rotary)")
    if o.heads % o.kv_heads:
        raise PlacerError(f"llama: heads {o.heads} must be a multiple of kv_heads {o.kv_heads}")


def weight_shapes(o: Options) -> dict[str, tuple[int, ...]]:
    """Every weight's name and shape, in graph order. Projections are stored [in, out] for MatMul."""
    head_dim = o.hidden // o.heads
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (o.vocab, o.hidden)}
    for layer in range(o.layers):
        p = f"layers.{layer}."
        shapes |= {
            p + "attn_norm.weight": (o.hidden,),
            p + "attn.q_proj.weight": (o.hidden, o.heads * head_dim),
            p + "attn.k_proj.weight": (o.hidden, o.kv_heads * head_dim),
            p + "attn.v_proj.weight": (o.hidden, o.kv_heads * head_dim),
            p + "attn.o_proj.weight": (o.heads * head_dim, o.hidden),
            p + "mlp_norm.weight": (o.hidden,),
            p + "mlp.gate_proj.weight": (o.hidden, o.mlp),
            p + "mlp.up_proj.weight": (o.hidden, o.mlp),
            p + "mlp.down_proj.weight": (o.mlp, o.hidden),
        }
    return shapes | {"norm.weight": (o.hidden,), "lm_head.weight": (o.hidden, o.vocab)}


def parameter_count(o: Options) -> int:
    """Number of weights (Llama-2-7B: 6,738,415,616; 70B: 68,976,648,192)."""
    return sum(math.prod(shape) for shape in weight_shapes(o).values())


def input_shapes(o: Options) -> dict[str, tuple[int, ...]]:
    return {"tokens": (o.batch, o.seq_len)}


def _random_weights(o: Options, seed: int) -> list[TensorProto]:
    """Seeded weights: N(0, 1) embeddings, N(0, 1/fan_in) projections (attention scores and logits O(1),
    so a wrong rotary or head order shows in the output), norm gains near 1."""
    rng = np.random.default_rng(seed)
    tensors = []
    for name, shape in weight_shapes(o).items():
        if name.endswith("norm.weight"):
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name == "embed_tokens.weight":
            value = rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) / math.sqrt(shape[0])
        tensors.append(numpy_helper.from_array(value.astype(np.float32), name))
    return tensors


def _external_weights(o: Options, location: str) -> list[TensorProto]:
    """Weights as references into the file `location`, back to back (each aligned), with no data."""
    tensors, offset = [], 0
    for name, shape in weight_shapes(o).items():
        tensor = TensorProto(name=name, dims=shape, data_type=TensorProto.FLOAT, data_location=TensorProto.EXTERNAL)
        length = 4 * math.prod(shape)
        for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
            tensor.external_data.add(key=key, value=value)
        tensors.append(tensor)
        offset = -(-(offset + length) // ALIGN) * ALIGN
    return tensors


class _Graph:
    """Nodes and constants under construction; each method adds ops and returns its output's name."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.constants: list[TensorProto] = []

    def op(self, op_type: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def const(self, name: str, values, dtype=np.int64) -> str:
        self.constants.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def rms_norm(self, x: str, weight: str, name: str) -> str:
        """x / sqrt(mean(x^2) + eps) * weight, over the last axis."""
        square = self.op("Mul", [x, x], f"{name}.square")
        mean = self.op("ReduceMean", [square], f"{name}.mean", axes=[-1], keepdims=1)
        rms = self.op("Sqrt", [self.op("Add", [mean, "const.eps"], f"{name}.add_eps")], f"{name}.rms")
        return self.op("Mul", [self.op("Div", [x, rms], f"{name}.normed"), weight], name)

    def rotary(self, x: str, name: str) -> str:
        """x * cos + rotate_half(x) * sin, with rotate_half([x1, x2]) = [-x2, x1] on the head dimension."""
        first = self.op("Slice", [x, "const.zero", "const.half", "const.last_axis"], f"{name}.first_half")
        second = self.op("Slice", [x, "const.half", "const.head_dim", "const.last_axis"], f"{name}.second_half")
        rotated = self.op("Concat", [self.op("Neg", [second], f"{name}.neg"), first], f"{name}.rotate_half", axis=-1)
        return self.op("Add", [self.op("Mul", [x, "rope.cos"], f"{name}.cos"),
                               self.op("Mul", [rotated, "rope.sin"], f"{name}.sin")], name)

    def heads(self, x: str, shape: str, name: str) -> str:
        """[batch, seq, n * head_dim] -> [batch, n, seq, head_dim]."""
        return self.op("Transpose", [self.op("Reshape", [x, shape], f"{name}.split")], name, perm=[0, 2, 1, 3])


def _tables(g: _Graph, o: Options) -> None:
    """The rotary cos/sin tables and the causal mask, computed in the graph from a few numbers, so that
    the model file stays small at a 4096-token context."""
    head_dim = o.hidden // o.heads
    inv_freq = 1.0 / ROPE_THETA ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    g.const("rope.inv_freq", inv_freq, np.float32)
    positions = g.op("Range", [g.const("const.zero_f", 0.0, np.float32), g.const("const.seq_f", o.seq_len, np.float32),
                               g.const("const.one_f", 1.0, np.float32)], "rope.positions")
    column = g.op("Unsqueeze", [positions, g.const("const.axis_1", [1])], "rope.positions_column")
    angles = g.op("Mul", [column, "rope.inv_freq"], "rope.angles")
    both = g.op("Concat", [angles, angles], "rope.angles_both", axis=-1)   # [seq, head_dim], as HF's halves
    g.op("Cos", [both], "rope.cos")
    g.op("Sin", [both], "rope.sin")
    # 0 on and below the diagonal, -inf above it: a step attends to itself and the past
    minus_inf = helper.make_tensor("minus_inf", TensorProto.FLOAT, [1], [-np.inf])
    full = g.op("ConstantOfShape", [g.const("const.seq_seq", [o.seq_len, o.seq_len])], "mask.full", value=minus_inf)
    g.op("Trilu", [full, g.const("const.one", 1)], "mask.causal", upper=1)


def _block(g: _Graph, o: Options, x: str, layer: int) -> str:
    p = f"layers.{layer}."
    head_dim, group = o.hidden // o.heads, o.heads // o.kv_heads
    h = g.rms_norm(x, p + "attn_norm.weight", p + "attn_norm")
    q = g.rotary(g.heads(g.op("MatMul", [h, p + "attn.q_proj.weight"], p + "attn.q_proj"), "const.q_heads",
                         p + "attn.q"), p + "attn.q_rot")
    k = g.rotary(g.heads(g.op("MatMul", [h, p + "attn.k_proj.weight"], p + "attn.k_proj"), "const.kv_heads",
                         p + "attn.k"), p + "attn.k_rot")
    v = g.heads(g.op("MatMul", [h, p + "attn.v_proj.weight"], p + "attn.v_proj"), "const.kv_heads", p + "attn.v")
    if group > 1:
        # grouped-query attention: kv head j serves query heads j*group .. j*group+group-1 (HF's repeat_kv)
        def repeat(t: str, name: str) -> str:
            wide = g.op("Expand", [g.op("Unsqueeze", [t, "const.axis_2"], f"{name}.unsqueeze"), "const.kv_groups"],
                        f"{name}.expand")
            return g.op("Reshape", [wide, "const.repeated"], name)
        k, v = repeat(k, p + "attn.k_repeat"), repeat(v, p + "attn.v_repeat")
    scores = g.op("MatMul", [q, g.op("Transpose", [k], p + "attn.k_t", perm=[0, 1, 3, 2])], p + "attn.scores")
    scaled = g.op("Mul", [scores, "const.scale"], p + "attn.scaled")
    probs = g.op("Softmax", [g.op("Add", [scaled, "mask.causal"], p + "attn.masked")], p + "attn.probs", axis=-1)
    context = g.op("MatMul", [probs, v], p + "attn.context")
    merged = g.op("Reshape", [g.op("Transpose", [context], p + "attn.context_t", perm=[0, 2, 1, 3]), "const.hidden"],
                  p + "attn.merged")
    x = g.op("Add", [x, g.op("MatMul", [merged, p + "attn.o_proj.weight"], p + "attn.o_proj")], p + "attn.residual")
    # SwiGLU: down(silu(gate(h)) * up(h)), silu(a) = a * sigmoid(a)
    h = g.rms_norm(x, p + "mlp_norm.weight", p + "mlp_norm")
    gate = g.op("MatMul", [h, p + "mlp.gate_proj.weight"], p + "mlp.gate_proj")
    silu = g.op("Mul", [gate, g.op("Sigmoid", [gate], p + "mlp.sigmoid")], p + "mlp.silu")
    both = g.op("Mul", [silu, g.op("MatMul", [h, p + "mlp.up_proj.weight"], p + "mlp.up_proj")], p + "mlp.gated")
    return g.op("Add", [x, g.op("MatMul", [both, p + "mlp.down_proj.weight"], p + "mlp.down_proj")], p + "mlp.residual")


def build(o: Options, location: str | None, seed: int) -> onnx.ModelProto:
    """The model at options `o`: seeded random weights when they fit `RANDOM_WEIGHT_BYTES`, else
    references into the external data file `location` (which must then be given)."""
    _check(o)
    head_dim, group = o.hidden // o.heads, o.heads // o.kv_heads
    if 4 * parameter_count(o) <= RANDOM_WEIGHT_BYTES:
        weights = _random_weights(o, seed)
    elif location is None:
        raise PlacerError(f"llama: {parameter_count(o):,} parameters are too many to hold; export it to a file")
    else:
        weights = _external_weights(o, location)
    g = _Graph()
    g.const("const.eps", NORM_EPS, np.float32)
    g.const("const.zero", [0])
    g.const("const.half", [head_dim // 2])
    g.const("const.head_dim", [head_dim])
    g.const("const.last_axis", [-1])
    g.const("const.q_heads", [o.batch, o.seq_len, o.heads, head_dim])
    g.const("const.kv_heads", [o.batch, o.seq_len, o.kv_heads, head_dim])
    if group > 1:
        g.const("const.axis_2", [2])
        g.const("const.kv_groups", [o.batch, o.kv_heads, group, o.seq_len, head_dim])
        g.const("const.repeated", [o.batch, o.heads, o.seq_len, head_dim])
    g.const("const.hidden", [o.batch, o.seq_len, o.hidden])
    g.const("const.scale", 1.0 / math.sqrt(head_dim), np.float32)
    _tables(g, o)
    x = g.op("Gather", ["embed_tokens.weight", "tokens"], "embed_tokens")
    for layer in range(o.layers):
        x = _block(g, o, x, layer)
    g.op("MatMul", [g.rms_norm(x, "norm.weight", "norm"), "lm_head.weight"], "logits")
    graph = helper.make_graph(
        g.nodes, "llama",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, [o.batch, o.seq_len])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [o.batch, o.seq_len, o.vocab])],
        initializer=weights + g.constants)
    from graphs.export import OPSET   # here: graphs.export imports the registry, which imports this module
    # IR version 8, as torch writes with opset 17: runtimes that read the rest of the zoo read this too
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8,
                             producer_name="placer zoo")


def _entry(name: str, options: type, description: str) -> OnnxZooModel:
    return OnnxZooModel(name=name, description=description, options=options, build=build,
                        parameters=parameter_count, input_shapes=input_shapes,
                        input_names=("tokens",), output_names=("logits",))


ENTRIES = (
    _entry("llama", Options, "Llama-shaped decoder, tiny: 2 layers, hidden 64, 4 heads sharing 2 key-value heads"),
    _entry("llama2_7b", Llama2_7B, "Llama-2-7B shape: 32 layers, hidden 4096, 32 heads, MLP 11008; no weights"),
    _entry("llama2_70b", Llama2_70B,
           "Llama-2-70B shape: 80 layers, hidden 8192, 64 heads over 8 key-value heads, MLP 28672; no weights"),
)
