"""Repeated blocks (placer.graph.repeats): a deep model's layers are found from its structure, in
the Llama builder's graph and in a torch export alike, and a layer wired otherwise ends the run."""

from __future__ import annotations

import onnx
import pytest

import graphs
import testgraphs
from placer.graph.load import load_graph
from placer.graph.repeats import find_repeats


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return graphs.export("llama", tmp_path_factory.mktemp("repeats") / "llama.onnx", layers=6)


def test_a_llamas_layers_are_its_blocks(llama):
    graph = load_graph(llama)
    found = find_repeats(graph)
    assert found is not None and len(found.blocks) == 6
    for j, block in enumerate(found.blocks):
        assert all(n.startswith(f"layers.{j}.") for n in block)
    assert not any(n.startswith("layers.") for n in (*found.prefix, *found.suffix))
    assert len(found.prefix) + 6 * found.period + len(found.suffix) == len(graph.nodes)


def test_a_torch_exported_transformers_layers_are_its_blocks(tmp_path):
    graph = load_graph(graphs.export("transformer", tmp_path / "t.onnx", batch=2, seq_len=8, layers=4, vocab=64))
    found = find_repeats(graph)
    assert found is not None and len(found.blocks) == 4
    assert all(all(f"blocks.{j}/" in n for n in block) for j, block in enumerate(found.blocks))


def test_a_layer_that_reads_two_layers_back_ends_the_run(llama, tmp_path):
    """Layer 4's attention reads layer 2's output instead of layer 3's: the same ops and shapes, but
    wired otherwise. The run ends at layer 2: past it, what follows would read a block other than
    the last one (a reduced copy would drop the tensor layer 4 reads)."""
    model = onnx.load(llama)
    node = next(n for n in model.graph.node if n.name == "layers.4.attn_norm.square")
    two_back = next(n for n in model.graph.node if n.name == "layers.2.mlp.residual").output[0]
    node.input[:] = [two_back if t == node.input[0] else t for t in node.input]
    onnx.save(model, tmp_path / "skip.onnx")
    found = find_repeats(load_graph(tmp_path / "skip.onnx"))
    assert found is not None
    assert len(found.blocks) == 3 and found.blocks[-1][0].startswith("layers.2.")


def test_a_graph_without_layers_has_no_blocks(tmp_path):
    assert find_repeats(load_graph(testgraphs.tiny_conv_file(tmp_path / "conv.onnx"))) is None
