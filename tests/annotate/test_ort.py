"""ONNX Runtime runs an applied model, with the printed layer assignment setting, unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import diamond_model, feeds_for, if_model, ort_run, placement_json
from placer.annotate.write import ORT_SETTING, apply_placement, ort_layer_settings
from placer.graph.load import load_graph
from placer.placement import Placement

ort = pytest.importorskip("onnxruntime")


def test_ort_gives_the_same_outputs_with_the_layer_setting(diamond_graph, two_cpu_placement):
    feeds = feeds_for(diamond_graph)
    expected = ort_run(diamond_model(), feeds)
    placed = apply_placement(diamond_model(), two_cpu_placement, diamond_graph)
    got = ort_run(placed, feeds, settings=ort_layer_settings(two_cpu_placement))
    assert set(got) == {"y", "b"}
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])


def test_ort_matches_every_rule_of_the_setting_to_a_provider(diamond_graph, two_cpu_placement, capfd):
    placed = apply_placement(diamond_model(), two_cpu_placement, diamond_graph)
    options = ort.SessionOptions()
    options.log_severity_level = 1  # INFO: ORT reports how many layering rules found a provider
    options.add_session_config_entry(ORT_SETTING, ort_layer_settings(two_cpu_placement))
    ort.InferenceSession(placed.SerializeToString(), options, providers=["CPUExecutionProvider"])
    log = capfd.readouterr()
    assert "Matched 1 out of 1 rules" in log.out + log.err


def test_ort_really_parses_the_setting(diamond_graph, two_cpu_placement):
    placed = apply_placement(diamond_model(), two_cpu_placement, diamond_graph)
    options = ort.SessionOptions()
    options.add_session_config_entry(ORT_SETTING, ort_layer_settings(two_cpu_placement).rstrip(")"))
    with pytest.raises(Exception, match="layering config"):
        ort.InferenceSession(placed.SerializeToString(), options, providers=["CPUExecutionProvider"])


def test_a_gpu_placement_runs_in_ort_on_a_cpu_only_session(diamond_graph):
    # The cuda rule finds no provider in a CPU-only session: ORT skips it and the model still runs.
    gpu = Placement.from_dict(placement_json(diamond_graph, {"conv_a": "cuda:0", "mul": "cuda:0"}, "cpu",
                                             ["cuda:0", "cpu"]))
    settings = ort_layer_settings(gpu)
    assert settings == "cuda(=cuda); cpu(=cpu)"
    feeds = feeds_for(diamond_graph)
    got = ort_run(apply_placement(diamond_model(), gpu, diamond_graph), feeds, settings=settings)
    np.testing.assert_array_equal(got["y"], ort_run(diamond_model(), feeds)["y"])


def test_control_flow_model_runs_unchanged_after_apply():
    model = if_model()
    graph = load_graph(model)
    placement = Placement.from_dict(placement_json(graph, {"branch": "cpu:1"}, "cpu:0", ["cpu:0", "cpu:1"]))
    feeds = feeds_for(graph)
    got = ort_run(apply_placement(model, placement, graph), feeds, settings=ort_layer_settings(placement))
    np.testing.assert_array_equal(got["y"], ort_run(model, feeds)["y"])
