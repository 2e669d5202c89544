"""The padded environment observes the graph policy's own absolute features, so an agent trained
through it sees what the graph policy sees."""

from __future__ import annotations

import numpy as np

from placer.env import PlacementEnv
from placer.env.absolute_features import GROUP_FEATURES, HASH_BUCKETS, OP_VOCABULARY, op_column
from placer.graph.load import load_graph
from placer.hardware import load_cluster
from placer.policy.gnn.features import graph_features
from testgraphs import branches, unseen_op_model


def test_the_observation_and_the_graph_policys_features_agree_on_the_shared_columns():
    graph = load_graph(branches(4, 3, width=64, batch=32))
    env = PlacementEnv(graph, cluster="cpu-fast-slow-gpu", max_groups=16, max_devices=6)
    obs, _ = env.reset(seed=0)
    policy = graph_features(graph, env.cluster, grouping=env.grouping)
    G, D = env.n_groups, env.n_devices
    assert G > 2 and policy.edge_index.shape[1] > 0
    assert np.array_equal(obs["features"][:G, :GROUP_FEATURES], policy.groups)
    assert np.array_equal(obs["devices"][:D], policy.device)
    assert np.array_equal(obs["pair"][:G, :D], policy.pair)
    assert np.array_equal(obs["pair_mask"][:G, :D], policy.mask.astype(np.int8))
    # the bytes crossing each edge, producer to consumer: the adjacency's entry, on the same scale
    forward = policy.edge_attr[:, 1] > 0
    a, b = policy.edge_index[:, forward]
    assert np.array_equal(obs["adjacency"][a, b], policy.edge_attr[forward, 0])


def test_the_observations_pair_mask_is_the_graph_policys_where_a_device_holds_only_some_groups():
    """A device whose memory holds the small groups only: both mask the large ones there alone."""
    import dataclasses

    from placer.env.absolute_features import group_memory

    graph = load_graph(branches(4, 3, width=64, batch=32))
    cluster = load_cluster("cpu-fast-slow-gpu")
    env = PlacementEnv(graph, cluster=cluster, max_groups=16, max_devices=6)
    memory = group_memory(graph, env.grouping)
    gpu = cluster.devices[-1]
    small = dataclasses.replace(gpu, model=dataclasses.replace(gpu.model, memory_bytes=int(np.median(memory))))
    cluster = dataclasses.replace(cluster, devices=(*cluster.devices[:-1], small))
    env = PlacementEnv(graph, cluster=cluster, max_groups=16, max_devices=6)
    obs, _ = env.reset(seed=0)
    policy = graph_features(graph, cluster, grouping=env.grouping)
    G, D = env.n_groups, env.n_devices
    fits = memory <= small.model.memory_bytes
    assert fits.any() and not fits.all()
    assert np.array_equal(policy.mask[:, -1], fits) and policy.mask[:, :-1].all()
    assert np.array_equal(obs["pair_mask"][:G, :D], policy.mask.astype(np.int8))


def test_an_op_outside_the_vocabulary_lands_in_a_hashed_bucket_in_the_environment_too():
    env = PlacementEnv(load_graph(unseen_op_model()), cluster="2xt4-pcie", max_groups=4, max_devices=4, n_groups=1)
    obs, _ = env.reset(seed=0)
    column = op_column("Mish")
    assert "Mish" not in OP_VOCABULARY and len(OP_VOCABULARY) <= column < len(OP_VOCABULARY) + HASH_BUCKETS
    # one group of Relu, Mish and MatMul: a third of it in the Mish's bucket, as in the policy's features
    assert obs["features"][0, column] == np.float32(1 / 3)
    assert obs["features"][0, env.op_types.index("Relu")] == np.float32(1 / 3)
    assert env.observation_space.contains(obs)
