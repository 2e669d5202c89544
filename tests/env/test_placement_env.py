"""`PlacementEnv`: the Gymnasium contract, rewards, failures, and what `info` carries."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import placer.env
import placer.hardware
from placer.devices import parse_devices
from placer.env import ENV_ID, PlacementEnv
from placer.errors import PlacerError
from placer.costmodel.simulator import SimulatedMeasurer
from placer.placement import Placement

DEVICES = ["cpu:0", "cpu:1"]


@pytest.mark.parametrize("mode", ["one_shot", "sequential"])
def test_the_environment_passes_gymnasiums_checker(graph, mode):
    env = gymnasium.make(ENV_ID, graph=graph, devices=DEVICES, n_groups=4, mode=mode)
    check_env(env.unwrapped)


def test_importing_placer_env_registers_it_with_gymnasium(graph):
    assert placer.env.ENV_ID in gymnasium.registry
    env = gymnasium.make(ENV_ID, graph=graph, devices=DEVICES, n_groups=4)
    obs, _ = env.reset(seed=0)
    assert obs["features"].shape[0] == 4 and env.action_space.shape == (4,)
    env.close()


def test_the_reward_is_minus_the_square_root_of_the_step_time(graph):
    env = PlacementEnv(graph, SimulatedMeasurer(graph, DEVICES), n_groups=4)
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step(np.array([0, 1, 0, 1]))
    m = info["measurement"]
    assert terminated and not truncated and m["ok"]
    assert reward == pytest.approx(-math.sqrt(m["step_time"]))
    placement = info["placement"]
    assert isinstance(placement, Placement) and placement.graph_sha256 == graph.sha256
    assert set(placement.nodes) == set(graph.nodes)


def test_a_failed_placement_is_rewarded_as_if_it_took_the_failure_time(graph):
    weights = sum(t.nbytes for t in graph.initializers.values())
    devices = parse_devices(f"cpu:0[mem={weights // 2 + 40_000}],cpu:1[mem={weights // 2 + 40_000}]")
    env = PlacementEnv(graph, devices=devices, n_groups=4, failure_time=100.0)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(np.zeros(4, dtype=np.int64))
    assert not info["measurement"]["ok"] and info["measurement"]["failure"] == "oom"
    assert reward == pytest.approx(-10.0)
    env.reset()
    _, reward, _, _, info = env.step(np.array([0, 0, 1, 1]))
    assert info["measurement"]["ok"] and reward > -1.0


def test_sequential_mode_pays_only_at_the_end_and_agrees_with_one_shot(graph):
    one = PlacementEnv(graph, devices=DEVICES, n_groups=4)
    seq = PlacementEnv(graph, devices=DEVICES, n_groups=4, mode="sequential")
    action = [1, 0, 0, 1]
    one.reset(seed=0)
    _, expected, *_ = one.step(np.array(action))
    obs, _ = seq.reset(seed=0)
    assert (obs["placed"] == 2).all()        # the device count marks "not placed yet"
    rewards = []
    for a in action:
        obs, r, terminated, _, _ = seq.step(a)
        rewards.append(r)
    assert rewards[:-1] == [0.0, 0.0, 0.0] and terminated
    assert rewards[-1] == pytest.approx(expected) and list(obs["placed"]) == action


def test_the_observation_holds_group_features_and_adjacency_in_unit_range(graph):
    env = PlacementEnv(graph, devices=DEVICES, n_groups=4)
    obs, _ = env.reset(seed=0)
    f, adj = obs["features"], obs["adjacency"]
    assert f.shape[0] == adj.shape[0] == adj.shape[1] == 4
    assert f.min() >= 0.0 and f.max() <= 1.0 and adj.min() >= 0.0 and adj.max() <= 1.0
    # Four independent branches: the only bytes between groups flow into the concat's group.
    concat_group = env.grouping.node_group["concat"]
    assert (adj[:, concat_group] > 0).sum() == 3 and adj[concat_group].sum() == 0
    # The op-type histogram: every group holds MatMul and Relu.
    matmul, relu = env.op_types.index("MatMul"), env.op_types.index("Relu")
    assert (f[:, matmul] > 0).all() and (f[:, relu] > 0).all()


def test_a_bad_mode_is_a_placer_error(graph):
    with pytest.raises(PlacerError, match="mode"):
        PlacementEnv(graph, devices=DEVICES, mode="batch")


def test_on_a_described_cluster_the_devices_are_its_and_the_rewards_its_simulated_step_times(graph, tmp_path):
    from placer.costmodel.roofline import RooflineCostModel
    from placer.costmodel.simulator import Simulator
    from placer.hardware import load_cluster

    cluster = load_cluster("cpu-fast-slow-gpu")
    path = tmp_path / "mine.toml"
    path.write_text((Path(placer.hardware.__file__).parent / "catalogue" / "clusters" / "cpu-fast-slow-gpu.toml")
                    .read_text())
    sim = Simulator(graph, cluster.device_names, RooflineCostModel(cluster, graph))
    for given in ("cpu-fast-slow-gpu", path, cluster):   # a catalogue name, a file, a Cluster
        env = gymnasium.make(ENV_ID, graph=graph, cluster=given, n_groups=4).unwrapped
        assert env.devices == cluster.device_names and env.n_devices == 3
        env.reset(seed=0)
        action = np.array([0, 1, 2, 1])
        _, reward, _, _, info = env.step(action)
        assign = [int(action[env.grouping.node_group[n]]) for n in graph.nodes]
        expected = sim.simulate(assign).step_time
        m = info["measurement"]
        assert m["ok"] and m["step_time"] == expected and reward == pytest.approx(-math.sqrt(expected))
        assert m["protocol"]["kind"] == "simulated" and m["protocol"]["cluster"] == "cpu-fast-slow-gpu"


def test_a_cluster_with_devices_or_a_measurer_is_refused_and_an_unknown_one_is_one_line(graph):
    with pytest.raises(PlacerError, match="not both"):
        PlacementEnv(graph, devices=DEVICES, cluster="paper-2xk40")
    with pytest.raises(PlacerError, match="not both"):
        PlacementEnv(graph, SimulatedMeasurer(graph, DEVICES), cluster="paper-2xk40")
    with pytest.raises(PlacerError, match="unknown cluster 'dgx-9000'") as refused:
        PlacementEnv(graph, cluster="dgx-9000")
    assert "\n" not in str(refused.value)
