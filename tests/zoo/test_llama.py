"""The Llama shapes (graphs.llama): the tiny one computes what a torch Llama computes with its weights,
and the 7B and 70B shapes are exported in a moment as a small model file and a sparse (or absent) data file."""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import numpy_helper

import graphs
from graphs import llama
from placer.cli import main
from placer.errors import PlacerError
from placer.graph.load import load_graph

export_module = importlib.import_module("graphs.export")   # the package re-exports a function of that name

TINY = {"batch": 2}   # the default tiny shape, two sequences


def _config_count(layers, hidden, heads, kv_heads, mlp, vocab) -> int:
    """Llama's parameters from its configuration: embeddings and LM head, per layer q/o, k/v (kv heads only),
    three MLP matrices and two norms, the final norm."""
    head_dim = hidden // heads
    per_layer = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + 3 * hidden * mlp + 2 * hidden
    return 2 * vocab * hidden + layers * per_layer + hidden


def _reference(tokens: torch.Tensor, w: dict[str, torch.Tensor], o: llama.Options) -> torch.Tensor:
    """Llama 2 in torch, as Hugging Face writes it (weights here stored [in, out])."""
    batch, steps = tokens.shape
    head_dim, group = o.hidden // o.heads, o.heads // o.kv_heads
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(steps, dtype=torch.float64), inv_freq)
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()

    def rms(x, gain):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * gain

    def rotate(x):
        first, second = x[..., :head_dim // 2], x[..., head_dim // 2:]
        return x * cos + torch.cat([-second, first], -1) * sin

    def heads(x, n):
        return x.view(batch, steps, n, head_dim).transpose(1, 2)

    x = w["embed_tokens.weight"][tokens]
    for layer in range(o.layers):
        p = f"layers.{layer}."
        h = rms(x, w[p + "attn_norm.weight"])
        q = rotate(heads(h @ w[p + "attn.q_proj.weight"], o.heads))
        k = rotate(heads(h @ w[p + "attn.k_proj.weight"], o.kv_heads)).repeat_interleave(group, dim=1)
        v = heads(h @ w[p + "attn.v_proj.weight"], o.kv_heads).repeat_interleave(group, dim=1)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + attended.transpose(1, 2).reshape(batch, steps, o.hidden) @ w[p + "attn.o_proj.weight"]
        h = rms(x, w[p + "mlp_norm.weight"])
        gated = F.silu(h @ w[p + "mlp.gate_proj.weight"]) * (h @ w[p + "mlp.up_proj.weight"])
        x = x + gated @ w[p + "mlp.down_proj.weight"]
    return rms(x, w["norm.weight"]) @ w["lm_head.weight"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return graphs.export("llama", tmp_path_factory.mktemp("llama") / "llama.onnx", **TINY)


def _run(path, tokens: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"tokens": tokens})[0]


def _tokens(o: llama.Options) -> np.ndarray:
    return np.random.default_rng(1).integers(0, o.vocab, (o.batch, o.seq_len))


@pytest.mark.parametrize("options", [{}, {"kv_heads": 4}, {"kv_heads": 1, "seq_len": 1}],
                         ids=["grouped", "one kv head per head (7B)", "one kv head, one step"])
def test_the_tiny_llama_computes_what_a_torch_llama_computes_with_its_weights(options, tiny, tmp_path):
    o = graphs.registry.make_options("llama", **TINY, **options)
    path = graphs.export("llama", tmp_path / "llama.onnx", **TINY, **options) if options else tiny
    model = onnx.load(str(path))
    weights = {t.name: torch.tensor(numpy_helper.to_array(t), dtype=torch.float64)
               for t in model.graph.initializer if t.name.endswith(".weight")}
    assert set(weights) == set(llama.weight_shapes(o))
    tokens = _tokens(o)
    expected = _reference(torch.from_numpy(tokens), weights, o).numpy()
    got = _run(path, tokens)
    assert got.shape == (o.batch, o.seq_len, o.vocab) and np.std(expected) > 0.1
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_the_graph_reads_as_llama(tiny):
    model = onnx.load(str(tiny))
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == graphs.OPSET
    names = {node.name for node in model.graph.node}
    assert {"embed_tokens", "layers.1.attn.q_proj", "layers.1.attn.k_repeat", "layers.1.mlp.gate_proj", "logits"} <= (
        names)
    assert json.loads({p.key: p.value for p in model.metadata_props}["placer.zoo.options"])["kv_heads"] == 2


def test_same_options_give_the_same_bytes(tiny, tmp_path):
    assert graphs.export("llama", tmp_path / "again.onnx", **TINY).read_bytes() == tiny.read_bytes()


@pytest.mark.parametrize("name, expected", [("llama2_7b", 6_738_415_616), ("llama2_70b", 68_976_648_192)])
def test_the_published_shapes_have_their_parameter_counts(name, expected, tmp_path):
    o = graphs.get(name).options()
    assert _config_count(o.layers, o.hidden, o.heads, o.kv_heads, o.mlp, o.vocab) == expected
    path = graphs.export(name, tmp_path / f"{name}.onnx", data="absent")
    model = onnx.load(str(path), load_external_data=False)
    weights = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert sum(math.prod(t.dims) for t in weights) == expected == graphs.parameter_count(name)
    assert all(t.name.endswith(".weight") for t in weights)
    assert not (tmp_path / f"{name}.onnx.data").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the peak memory from /proc")
def test_the_70b_shape_exports_in_a_moment_with_little_memory_and_a_sparse_data_file(tmp_path, monkeypatch):
    # a fresh interpreter, so that its peak memory is the export's (plus importing torch). The peak is
    # VmHWM, not getrusage's ru_maxrss: Linux carries that over from the forking parent, pytest's own size
    target = tmp_path / "llama2_70b.onnx"
    code = ("import re, time, graphs\n"
            "def peak(): return int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
            "before, start = peak(), time.perf_counter()\n"
            f"graphs.export('llama2_70b', {str(target)!r})\n"
            "print(time.perf_counter() - start, before, peak())")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    seconds, before_kib, peak_kib = map(float, ran.stdout.split())
    assert seconds < 20 and peak_kib < 1024 * 1024 and peak_kib - before_kib < 200 * 1024
    assert target.stat().st_size < 2_000_000
    data = tmp_path / "llama2_70b.onnx.data"
    assert data.stat().st_size >= 4 * 68_976_648_192 and data.stat().st_blocks * 512 < 1_000_000   # no disk used
    model = onnx.load(str(target), load_external_data=False)
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [1, 4096]
    onnx.checker.check_model(str(target))
    monkeypatch.chdir(tmp_path)   # the checker looks for the data file of an in-memory model here (it reads none of it)
    onnx.checker.check_model(model)


def test_a_weightless_small_model_runs_on_zeros_and_loads_in_placer(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(llama, "RANDOM_WEIGHT_BYTES", 0)
    path = graphs.export("llama", tmp_path / "zeros.onnx", **TINY)
    data = tmp_path / "zeros.onnx.data"
    assert data.stat().st_size > 0 and path.stat().st_size < tiny.stat().st_size / 5
    o = graphs.registry.make_options("llama", **TINY)
    assert not _run(path, _tokens(o)).any()   # zero weights, zero logits: the offsets all lie in the file
    weightless = [node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node]
    assert weightless == [node.op_type for node in onnx.load(str(tiny)).graph.node]
    assert load_graph(path).nodes


def test_a_tiny_model_over_the_file_limit_keeps_its_random_weights_in_a_data_file(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(export_module, "LARGE_WEIGHT_BYTES", 10_000)
    path = graphs.export("llama", tmp_path / "large.onnx", **TINY)
    assert (tmp_path / "large.onnx.data").stat().st_blocks > 0
    o = graphs.registry.make_options("llama", **TINY)
    np.testing.assert_array_equal(_run(path, _tokens(o)), _run(tiny, _tokens(o)))


def test_inspect_reports_the_tiny_models_parameters(tiny, capsys):
    assert main(["inspect", "--graph", str(tiny)]) == 0
    out = capsys.readouterr().out
    assert "tokens" in out and "2x16x256" in out
    # the weights and a few dozen shape constants
    assert 0 <= int(out.split("parameters")[1].split()[0].replace(",", "")) - graphs.parameter_count("llama") < 100


def test_the_cli_exports_the_70b_shape(tmp_path, capsys):
    assert main(["zoo", "export", "llama2_70b", "-o", str(tmp_path / "70b.onnx"), "--layers", "2"]) == 0
    assert "70b.onnx" in capsys.readouterr().out
    assert (tmp_path / "70b.onnx.data").stat().st_blocks == 0


def test_a_zoo_name_resolves_to_a_cached_export(tmp_path, monkeypatch):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path))
    path = graphs.resolve("llama.onnx")
    assert path.is_relative_to(tmp_path) and graphs.resolve("llama.onnx") == path


@pytest.mark.parametrize("options, message", [({"heads": 3}, "heads of an even size"),
                                              ({"kv_heads": 3}, "multiple of kv_heads")])
def test_shapes_that_do_not_split_fail_in_words(options, message, tmp_path):
    with pytest.raises(PlacerError, match=message):
        graphs.export("llama", tmp_path / "bad.onnx", **options)


def test_the_llamas_have_no_torch_model():
    with pytest.raises(PlacerError, match="export it instead"):
        graphs.build_model("llama")
