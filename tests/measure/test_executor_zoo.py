"""Every zoo model, under random placements over 2 and 3 virtual CPU devices, computes what the
single-device run and onnxruntime compute."""

from __future__ import annotations

import random

import graphs
import numpy as np
import pytest

from placer.graph.load import load_graph
from placer.engines.torch.executor import PlacedExecutor
from placer.graph.feeds import random_feeds
from placer.kernels.prepare import prepare
from placer.placement import Placement

from .conftest import onnxruntime_outputs

# Small options keep the suite fast; the CNNs have no size option and are marked slow.
SMALL = {"rnnlm": dict(batch=2, seq_len=5, vocab=50), "nmt": dict(batch=2, seq_len=5, vocab=50),
         "transformer": dict(seq_len=8, layers=2, vocab=100)}
SLOW = {"inception_v3", "resnet50"}
NAMES = [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in graphs.names()]


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("zoo")


def _run(graph, prepared, placement, feeds):
    with PlacedExecutor(graph, placement, placement.devices, prepared=prepared) as executor:
        return {k: v.cpu().numpy() for k, v in executor.run(feeds).items()}


@pytest.mark.parametrize("name", NAMES)
def test_random_placements_of_zoo_model_match_single_device_and_onnxruntime(name, zoo_dir):
    path = graphs.export(name, zoo_dir / f"{name}.onnx", **SMALL.get(name, {}))
    graph = load_graph(path)
    prepared = prepare(graph)
    feeds = random_feeds(graph, seed=0)
    nodes = list(graph.nodes)
    single = _run(graph, prepared, Placement.single_device(nodes, "cpu:0", devices=["cpu:0"]), feeds)
    reference = onnxruntime_outputs(graph.model, feeds)
    for out, value in reference.items():
        np.testing.assert_allclose(single[out], value, rtol=1e-3, atol=1e-4, err_msg=f"{name}:{out} vs onnxruntime")
    rng = random.Random(name)
    for n_devices in (2, 3):
        devices = [f"cpu:{i}" for i in range(n_devices)]
        placement = Placement(devices, {n: rng.choice(devices) for n in nodes})
        placed = _run(graph, prepared, placement, feeds)
        for out, value in single.items():
            np.testing.assert_allclose(placed[out], value, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name}:{out} over {n_devices} devices")
