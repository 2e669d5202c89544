"""The placement picture: a layered layout by topological depth, written as an image."""

from __future__ import annotations

import pytest

from placer.annotate.draw import draw_placement, layered_layout

pytest.importorskip("matplotlib")


def test_layout_puts_each_node_one_layer_after_its_deepest_producer(diamond_graph):
    pos = layered_layout(diamond_graph)
    depth = {n: int(x) for n, (x, _) in pos.items()}
    assert depth == {"conv1": 0, "Relu_0": 1, "conv_a": 2, "Sigmoid_0": 2, "mul": 3, "Add_0": 4,
                     "pool": 5, "flatten": 6, "fc": 7}
    assert len({pos["conv_a"], pos["Sigmoid_0"]}) == 2   # same layer, different rows


def test_drawing_writes_a_png(tmp_path, diamond_graph, two_cpu_placement):
    path = draw_placement(diamond_graph, two_cpu_placement, tmp_path / "out" / "placement.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_drawing_format_follows_the_suffix(tmp_path, diamond_graph, two_cpu_placement):
    path = draw_placement(diamond_graph, two_cpu_placement, tmp_path / "placement.svg")
    assert path.read_text().lstrip().startswith("<?xml") and "cpu:1 (2 nodes)" in path.read_text()
