"""One environment for many problems: padded spaces, `reset(options={"graph", "cluster"})` switching
the graph and the cluster between episodes, and vectorised environments over it."""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from placer.costmodel.roofline import RooflineCostModel
from placer.costmodel.simulator import Simulator
from placer.env import PlacementEnv
from placer.env.absolute_features import GROUP_FEATURES
from placer.env.features import SHAPE_DIMS
from placer.errors import PlacerError
from placer.graph.load import load_graph
from placer.hardware import load_cluster
from testgraphs import branches

MAX_GROUPS, MAX_DEVICES = 16, 12


@pytest.fixture(scope="module")
def small():
    return load_graph(branches(2, 2, width=32))


@pytest.fixture(scope="module")
def large():
    return load_graph(branches(6, 3, width=128, batch=64))


def padded(graph, cluster="paper-2xk40", **kwargs):
    return PlacementEnv(graph, cluster=cluster, max_groups=MAX_GROUPS, max_devices=MAX_DEVICES, **kwargs)


def test_reset_switches_graph_and_cluster_and_the_spaces_hold_both(small, large):
    env = padded(small)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert obs["device_mask"].sum() == 3   # paper-2xk40: a CPU and 2 K40s
    first_devices, first_groups = obs["devices"].copy(), obs["group_mask"].sum()

    obs, _ = env.reset(options={"graph": large, "cluster": load_cluster("8xh100-nvlink")})
    assert env.observation_space.contains(obs)
    assert env.graph is large and env.cluster.name == "8xh100-nvlink"
    assert obs["device_mask"].sum() == 10 and first_groups < obs["group_mask"].sum() == env.n_groups <= MAX_GROUPS
    assert not np.array_equal(obs["devices"][:3], first_devices[:3])   # an H100 is not a K40
    assert (obs["pair"][:env.n_groups, :10, 2] == 1).all() and (obs["pair"][:, 10:] == 0).all()   # runs on every H100
    assert obs["pair_mask"][:env.n_groups, :10].all() and not obs["pair_mask"][env.n_groups:].any()
    assert not obs["pair_mask"][:, 10:].any()
    action = np.zeros(MAX_GROUPS, dtype=np.int64)
    action[:env.n_groups] = np.arange(env.n_groups) % 10
    _, reward, done, _, info = env.step(action)
    assert done and math.isfinite(reward) and info["measurement"]["ok"]
    assert info["measurement"]["protocol"]["cluster"] == "8xh100-nvlink"
    assert set(info["placement"].nodes) == set(large.nodes)
    assert set(info["placement"].nodes.values()) <= set(env.cluster.device_names)
    # the reward is the new problem's: the large graph's simulated step time on the H100s
    cluster = load_cluster("8xh100-nvlink")
    sim = Simulator(large, cluster.device_names, RooflineCostModel(cluster, large))
    expected = sim.simulate([int(action[env.grouping.node_group[n]]) for n in large.nodes]).step_time
    assert info["measurement"]["step_time"] == expected and reward == pytest.approx(-math.sqrt(expected))

    # the graph alone: the cluster stays
    obs, _ = env.reset(options={"graph": small})
    assert env.graph is small and env.cluster.name == "8xh100-nvlink" and obs["device_mask"].sum() == 10


def test_reset_takes_an_onnx_path_and_a_catalogue_name_as_the_constructor_does(tmp_path, small):
    import onnx

    onnx.save(branches(3, 2, width=16), tmp_path / "m.onnx")
    env = padded(small)
    obs, _ = env.reset(options={"graph": str(tmp_path / "m.onnx"), "cluster": "2xt4-pcie"})
    assert env.graph.source.endswith("m.onnx") and env.cluster.name == "2xt4-pcie"
    assert obs["device_mask"].sum() == 3 and env.observation_space.contains(obs)


def test_a_group_sent_to_a_device_the_episode_lacks_fails_the_placement(small):
    env = padded(small, n_groups=3)
    env.reset(seed=0)
    action = np.zeros(MAX_GROUPS, dtype=np.int64)
    action[1] = MAX_DEVICES - 1   # masked out: paper-2xk40 has 3 devices
    _, reward, done, _, info = env.step(action)
    assert done and reward == -math.sqrt(env.failure_time)
    assert info["measurement"]["failure"] == "INVALID" and info["placement"] is None


@pytest.mark.parametrize("mode", ["one_shot", "sequential"])
def test_the_padded_environment_passes_gymnasiums_checker(small, mode):
    check_env(padded(small, n_groups=3, mode=mode))


def test_the_sequential_mode_switches_too(small, large):
    env = padded(small, mode="sequential")
    counts = []
    for options in ({}, {"graph": large, "cluster": "v100-k40-mix"}):   # an episode, then another problem
        obs, _ = env.reset(options=options)
        assert (obs["placed"] == MAX_DEVICES).all()   # nothing placed yet
        done, steps = False, 0
        while not done:
            obs, reward, done, _, info = env.step(0)
            steps += 1
        assert steps == env.n_groups and info["measurement"]["ok"]
        assert (obs["placed"][:steps] == 0).all() and (obs["placed"][steps:] == MAX_DEVICES).all()
        counts.append(steps)
    assert env.graph is large and counts[0] < counts[1]


def test_sync_vector_env_runs_environments_on_different_problems(small, large):
    envs = gymnasium.vector.SyncVectorEnv([lambda: padded(small, n_groups=3),
                                           lambda: padded(large, cluster="4xa100-nvlink")])
    obs, _ = envs.reset(seed=0)
    assert obs["features"].shape == (2, MAX_GROUPS, GROUP_FEATURES + SHAPE_DIMS)
    assert obs["device_mask"].sum(axis=1).tolist() == [3, 5]
    _, reward, done, _, _ = envs.step(np.zeros((2, MAX_GROUPS), dtype=np.int64))
    assert done.all() and np.isfinite(reward).all() and reward[0] != reward[1]
    # one reset's options reach every environment
    obs, _ = envs.reset(options={"graph": small, "cluster": "cpu-rtx4090"})
    assert obs["device_mask"].sum(axis=1).tolist() == [2, 2]
    assert envs.observation_space.contains(obs)
    envs.close()


def test_switching_needs_padded_spaces_and_no_given_measurer(small, large):
    plain = PlacementEnv(small, cluster="paper-2xk40", n_groups=3)
    with pytest.raises(PlacerError, match="build it with max_groups= and max_devices= to switch"):
        plain.reset(options={"graph": large})
    env = padded(small, n_groups=3)
    with pytest.raises(PlacerError, match="unknown reset option 'devices'; the options are graph, cluster"):
        env.reset(options={"devices": ["cpu:0"]})
    with pytest.raises(PlacerError, match="10 devices do not fit this environment's max_devices=4"):
        PlacementEnv(small, cluster="paper-2xk40", max_groups=4, max_devices=4).reset(
            options={"cluster": "8xh100-nvlink"})
    with pytest.raises(PlacerError, match="give max_groups and max_devices together"):
        PlacementEnv(small, cluster="paper-2xk40", max_groups=4)
    from placer.costmodel.roofline import cluster_measurer

    given = PlacementEnv(small, cluster_measurer(load_cluster("paper-2xk40"), small), max_groups=4, max_devices=4)
    with pytest.raises(PlacerError, match="measures its own graph"):
        given.reset(options={"graph": large})


def test_the_docs_corpus_snippet_runs_as_written():
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "python.md").read_text()
    snippet = next(b for b in re.findall(r"```python\n(.*?)```", page, flags=re.S) if "max_groups=" in b)
    namespace: dict = {}
    exec(snippet, namespace)   # noqa: S102 - the page's own code
    env = namespace["env"]
    assert namespace["terminated"] and math.isfinite(namespace["reward"])
    assert namespace["info"]["measurement"]["ok"]   # the action kept to the real devices
    assert env.graph is namespace["item"].graph and env.cluster is namespace["item"].cluster
