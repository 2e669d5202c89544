"""Every zoo model loads with a complete static shape on every tensor, equal to what a real
onnxruntime run gives."""

from __future__ import annotations

import pytest

from placer.graph.feeds import random_feeds
from placer.kernels.loading import load_graph   # with the kernel table: every op must have a kernel

from .conftest import ort_shapes

graphs = pytest.importorskip("graphs")

# Small options keep the exports fast; the graph structure is the same as at full size.
SMALL = {"inception_v3": dict(batch=1), "resnet50": dict(batch=1),
         "rnnlm": dict(batch=2, seq_len=4, vocab=100), "nmt": dict(batch=2, seq_len=4, vocab=100),
         "transformer": dict(batch=1, seq_len=8, layers=2, vocab=100)}
HEAVY = {"inception_v3", "resnet50"}


def zoo_params():
    return [pytest.param(name, marks=[pytest.mark.slow] if name in HEAVY else [])
            for name in graphs.names()]


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_model_loads_with_complete_true_shapes(name, tmp_path):
    path = graphs.export(name, tmp_path / f"{name}.onnx", **SMALL.get(name, {}))
    graph = load_graph(path)
    assert len(graph.nodes) > 20 and graph.total_flops > 0 and graph.total_param_bytes > 0
    truth = ort_shapes(graph.model, random_feeds(graph))
    for node in graph.nodes.values():
        assert node.output_info, node.name
        for info in node.output_info:
            assert info.shape == truth[info.name], (node.name, info.name)
    assert all(node.device_kinds for node in graph.nodes.values())
