"""The environment loads a graph as the commands do: a path with --input-shape's bindings and the
sample inputs of --inputs (a dict or an .npz file), whose values then feed every real step."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

import placer   # noqa: F401  registers the environment
from controlflow import export_rate_gate, rate_inputs
from placer.env import ENV_ID, PlacementEnv
from placer.errors import PlacerError
from placer.kernels.loading import load_graph
from placer.measure.measurer import MeasureProtocol, RealMeasurer

DEVICES = ["cpu:0", "cpu:1"]


@pytest.fixture(scope="module")
def rate_gate(tmp_path_factory):
    return export_rate_gate(tmp_path_factory.mktemp("rate") / "vad.onnx")


def test_a_path_and_an_inputs_file_load_the_branch_they_take(rate_gate, tmp_path):
    np.savez(tmp_path / "in.npz", **rate_inputs(8000))
    env = gymnasium.make(ENV_ID, graph=str(rate_gate), inputs=str(tmp_path / "in.npz"), devices=DEVICES, n_groups=3)
    graph = env.unwrapped.graph
    assert graph.tensors["prob"].shape == (2, 1) and set(graph.sample_inputs) == {"x", "state", "sr"}
    env.reset(seed=0)
    assert env.step(env.action_space.sample())[2]


def test_real_steps_are_fed_the_sample_inputs(rate_gate):
    graph = load_graph(rate_gate, inputs={"sr": np.array(16000)})
    env = PlacementEnv(graph, RealMeasurer(graph, DEVICES, MeasureProtocol(warmup=0, repeats=1)), n_groups=3)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(np.zeros(env.n_groups, dtype=np.int64))
    assert info["measurement"]["ok"], info["measurement"]["reason"]
    assert reward == pytest.approx(-info["measurement"]["step_time"] ** 0.5)


def test_without_inputs_the_error_says_to_give_them(rate_gate):
    with pytest.raises(PlacerError, match=r"generated values of x, state, sr .* \(inputs= in Python\)"):
        PlacementEnv(str(rate_gate), devices=DEVICES)


def test_inputs_for_a_graph_already_loaded_are_refused(rate_gate):
    graph = load_graph(rate_gate, inputs={"sr": np.array(16000)})
    with pytest.raises(PlacerError, match="apply to a graph loaded here"):
        PlacementEnv(graph, devices=DEVICES, inputs={"sr": np.array(8000)})
