"""The graph policy: it sees the devices, places graphs and clusters it was not trained on, and its
checkpoints load on any graph and device count."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from placer.env.absolute_features import HASH_BUCKETS, OP_VOCABULARY, op_column
from placer.graph.grouping import group_graph
from placer.graph.load import load_graph
from placer.hardware import Cluster, ClusterDevice, Link, catalogue_models, load_cluster
from placer.policy.gnn import GraphPlacementPolicy, PolicyConfig, load_policy, save_policy
from placer.policy.gnn.episode import make_episode
from placer.policy.gnn.features import graph_features
from placer.policy.gnn.learn import LearnConfig, rollout, update
from placer.policy.gnn.tensors import FeatureTensors
from testgraphs import branches, unseen_op_model

TINY = PolicyConfig(hidden=16, layers=1, heads=1, rounds=1)


def two_gpus(slow_first: bool) -> Cluster:
    """A K40 and an H100 (15x the FLOP/s, 12x the bandwidth) joined by one link."""
    models = catalogue_models()
    slow, fast = ClusterDevice("cuda:0", models["tesla-k40"]), ClusterDevice("cuda:1", models["h100-sxm5-80gb"])
    if not slow_first:
        slow, fast = ClusterDevice("cuda:1", models["tesla-k40"]), ClusterDevice("cuda:0", models["h100-sxm5-80gb"])
    devices = (slow, fast) if slow_first else (fast, slow)
    link = Link("pcie", ("cuda:0", "cuda:1"), 15.75e9, 1e-5, "test")
    return Cluster("fast-slow" if not slow_first else "slow-fast", "test", devices, (link,))


def fast_device(cluster: Cluster) -> int:
    return [d.model.key for d in cluster.devices].index("h100-sxm5-80gb")


@pytest.fixture(scope="module")
def chains():
    return load_graph(branches(2, 3, width=256, batch=64))


def train_tiny(episodes, updates: int = 20, seed: int = 0) -> GraphPlacementPolicy:
    torch.manual_seed(seed)
    policy = GraphPlacementPolicy(TINY)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    config = LearnConfig(samples=8)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(updates):
        update(policy, optimizer, episodes, [rollout(policy, e, config, generator) for e in episodes], config)
    return policy


def fast_share(policy, episode) -> float:
    """The share of the greedy placement's groups on the fast device."""
    actions = policy.sample(episode.tensors, 1, greedy=True)[0, -1].numpy()
    return float(np.mean(actions == fast_device(episode.cluster)))


def test_a_trained_policy_puts_the_work_on_the_fast_device_whichever_its_index(chains):
    episodes = [make_episode(chains, two_gpus(slow_first)) for slow_first in (True, False)]
    torch.manual_seed(1)   # train_tiny's start: weights that put nothing on the fast device, so training moves it
    assert [fast_share(GraphPlacementPolicy(TINY), e) for e in episodes] == [0.0, 0.0]
    policy = train_tiny(episodes, seed=1)
    assert [fast_share(policy, e) for e in episodes] == [1.0, 1.0]


def test_a_policy_blind_to_the_devices_cannot_tell_fast_from_slow(chains):
    """The premise of the test above: with every device figure and per-device time made equal, the
    two devices look alike and the same training cannot prefer the fast one in both orders."""
    episodes = [make_episode(chains, two_gpus(slow_first)) for slow_first in (True, False)]
    for e in episodes:
        x = e.tensors
        e.tensors = FeatureTensors(**{**vars(x), "device": x.device.mean(0, keepdim=True).expand_as(x.device).clone(),
                                      "pair": x.pair.mean(1, keepdim=True).expand_as(x.pair).clone(),
                                      "group_time": x.group_time.mean(1, keepdim=True).expand_as(x.group_time).clone()})
    policy = train_tiny(episodes)
    assert min(fast_share(policy, e) for e in episodes) < 1.0


def test_the_device_figures_reach_the_logits(chains):
    """The gradient path: each device's datasheet and link figures move its logits."""
    torch.manual_seed(0)
    policy = GraphPlacementPolicy(TINY)
    x = make_episode(chains, two_gpus(True), yardstick=False).tensors
    device = x.device.clone().requires_grad_(True)
    x = FeatureTensors(**{**vars(x), "device": device})
    logits = policy.logits(x, policy.encode(x), policy.unplaced(x, 1))
    (logits[..., 1] - logits[..., 0]).sum().backward()
    grad = device.grad.abs().sum(dim=1)
    assert (grad > 0).all(), grad
    # each device's own figures: swapped between the two devices (nothing else), the logits change
    # (were only the cluster's mean seen, or no device figure, they would not)
    swapped = FeatureTensors(**{**vars(x), "device": x.device.detach().flip(0)})
    nothing = policy.unplaced(x, 1)
    with torch.no_grad():
        assert not torch.allclose(policy.logits(x, policy.encode(x), nothing),
                                  policy.logits(swapped, policy.encode(swapped), nothing))


def test_a_group_that_does_not_fit_a_devices_memory_is_masked_there_and_never_sampled(chains):
    """The mask of (group, device) pairs: a device whose memory cannot hold a group's weights and
    outputs is masked for it (only there), and no round of any sample puts the group there."""
    import dataclasses

    from placer.env.absolute_features import group_memory

    cluster = load_cluster("2xt4-pcie")
    grouping = make_episode(chains, cluster, yardstick=False).features.grouping
    memory = group_memory(chains, grouping)
    cap = int((memory.min() + memory.max()) / 2)   # cuda:0 holds the small groups only
    small = dataclasses.replace(cluster.devices[1], model=dataclasses.replace(cluster.devices[1].model,
                                                                              memory_bytes=cap))
    cluster = dataclasses.replace(cluster, devices=(cluster.devices[0], small, *cluster.devices[2:]))
    episode = make_episode(chains, cluster, yardstick=False)
    assert episode.features.grouping.groups == grouping.groups
    fits = memory <= cap
    assert fits.any() and not fits.all()
    assert (episode.features.mask == np.stack([np.ones_like(fits), fits, np.ones_like(fits)], axis=1)).all()
    torch.manual_seed(0)
    actions = GraphPlacementPolicy(TINY).sample(episode.tensors, 64, torch.Generator().manual_seed(0)).numpy()
    assert (actions[..., ~fits] != 1).all() and (actions[..., fits] == 1).any()


def chain_model(heavy: bool) -> onnx.ModelProto:
    """x -> MatMul -> Relu -> y, and with `heavy` a 1024x larger MatMul and its Relu beside it: the
    graph's slowest ops and its largest tensor between two groups."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [helper.make_node("MatMul", ["x", "wa"], ["a"], name="mm_a"),
             helper.make_node("Relu", ["a"], ["y"], name="relu_a")]
    inits, outputs = [w("wa", 64, 64)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 64])]
    if heavy:
        nodes += [helper.make_node("MatMul", ["x", "wb"], ["b"], name="mm_b"),
                  helper.make_node("Relu", ["b"], ["c"], name="relu_b")]
        inits.append(w("wb", 64, 65536))
        outputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [32, 65536]))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_features_are_absolute_not_scaled_by_the_graph():
    """An op's features do not change when heavier ops join the graph: nothing is divided by a graph's maximum."""
    cluster = load_cluster("2xt4-pcie")
    rows = []
    for heavy in (False, True):
        graph = load_graph(chain_model(heavy))
        grouping = group_graph(graph, method="nodes")
        features = graph_features(graph, cluster, grouping=grouping)
        g, r = grouping.node_group["mm_a"], grouping.node_group["relu_a"]
        edge = [tuple(e) for e in features.edge_index.T.tolist()].index((g, r))
        rows.append((features.groups[g, :-1], features.pair[g], features.device,   # the last column: position
                     features.edge_attr[edge]))
        if heavy:   # the premise: the heavy ops hold the graph's maxima (time, FLOPs, bytes on an edge)
            b = grouping.node_group["mm_b"]
            assert (features.group_time[b] > features.group_time[[g, r]]).all()
            assert features.groups[b, -6] > features.groups[g, -6] and features.edge_attr[:, 0].max() > features.edge_attr[edge, 0]
    for small, big in zip(*rows):
        assert np.allclose(small, big)


def test_an_unseen_op_type_falls_in_a_hashed_bucket():
    column = op_column("Mish")
    assert len(OP_VOCABULARY) <= column < len(OP_VOCABULARY) + HASH_BUCKETS
    # a stable hash (the same bucket in every process, or a checkpoint's buckets would mean other ops
    # elsewhere), and unseen ops spread over the buckets
    unseen = {op: op_column(op) - len(OP_VOCABULARY) for op in ("Mish", "Softplus", "GroupNormalization", "Selu")}
    assert unseen == {"Mish": 0, "Softplus": 1, "GroupNormalization": 2, "Selu": 3}
    assert op_column("MatMul") == OP_VOCABULARY.index("MatMul")
    graph = load_graph(unseen_op_model())
    features = graph_features(graph, load_cluster("2xt4-pcie"))
    assert features.groups[:, column].sum() > 0   # the Mish is counted in its bucket
    placement = GraphPlacementPolicy(TINY).place(graph, load_cluster("2xt4-pcie"))
    assert "mish" in placement.nodes


def test_a_checkpoint_loads_on_another_graph_and_device_count(tmp_path, chains):
    torch.manual_seed(0)
    policy = GraphPlacementPolicy(TINY)
    path = save_policy(policy, tmp_path / "policy.pt", {"made_by": "test"})
    loaded, info = load_policy(path)
    assert info["made_by"] == "test" and loaded.config == TINY
    from placer.policy.gnn.placing import place_episode

    for graph, cluster in [(chains, two_gpus(True)), (load_graph(branches(6, 4)), load_cluster("dgx1-v100"))]:
        placement = loaded.place(graph, cluster)
        assert set(placement.nodes) == set(graph.nodes)
        assert set(placement.devices) == set(cluster.device_names)
        # the same weights: the same logits and the policy's own placement (not the heuristic's
        # fallback, which two policies of any weights may share)
        episode = make_episode(graph, cluster)
        x = episode.tensors
        nothing = policy.unplaced(x, 1)
        with torch.no_grad():
            assert torch.equal(loaded.logits(x, loaded.encode(x), nothing), policy.logits(x, policy.encode(x), nothing))
        ours = place_episode(loaded, episode, keep_heuristic=False)
        assert ours.nodes == place_episode(policy, episode, keep_heuristic=False).nodes


def test_a_graph_larger_than_any_in_training_is_placed():
    """The largest training graph (nmt at sequence length 20) has 1946 ops; this one has 4001. The
    policy places its groups (at most MAX_GROUPS), and its own placement covers every node and runs."""
    from placer.policy.gnn.features import MAX_GROUPS
    from placer.policy.gnn.placing import place_episode

    graph = load_graph(branches(200, 10, width=8, batch=1))
    episode = make_episode(graph, load_cluster("4xa100-nvlink"), yardstick=False)   # no heuristics: the policy's own
    placement = place_episode(GraphPlacementPolicy(TINY), episode, keep_heuristic=False)
    assert len(placement.nodes) == len(graph.nodes) == 4001
    assert placement.extra["placer"]["groups"] <= MAX_GROUPS
    assert np.isfinite(placement.extra["placer"]["simulated_step_time"])



def test_the_chain_from_the_heuristic_starts_from_its_very_placement():
    """The policy's groups are split where the best heuristic's placement cuts them, so the start of
    its chain of rounds is that placement, not a projection on the groups (here 1.65x slower)."""
    episode = make_episode(load_graph(branches(4, 2, width=128, batch=32)), load_cluster("4xa100-nvlink"))
    assert episode.step_times(episode.start[None])[0] == episode.best_time
    assert (episode.start[episode.node_group] == episode.best_assign).all()


def wide_model(n: int, width: int = 8) -> onnx.ModelProto:
    """x -> n MatMul -> Relu pairs side by side, each Relu an output of the graph: n co-location groups."""
    w = onnx.numpy_helper.from_array(np.ones((width, width), np.float32), "w")
    nodes, outputs = [], []
    for b in range(n):
        nodes += [helper.make_node("MatMul", ["x", "w"], [f"m{b}"], name=f"mm{b}"),
                  helper.make_node("Relu", [f"m{b}"], [f"r{b}"], name=f"relu{b}")]
        outputs.append(helper.make_tensor_value_info(f"r{b}", TensorProto.FLOAT, [1, width]))
    graph = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              outputs, [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_graph_of_more_co_location_groups_than_max_groups_is_placed_in_max_groups():
    """2000 co-location groups (the 4001-op chains above coarsen to one): the policy still sees at
    most MAX_GROUPS groups, and its own placement covers every node and runs."""
    from placer.graph.grouping import colocate
    from placer.policy.gnn.features import MAX_GROUPS
    from placer.policy.gnn.placing import place_episode

    graph = load_graph(wide_model(2000))
    assert len(colocate(graph)) == 2000 > MAX_GROUPS
    episode = make_episode(graph, load_cluster("4xa100-nvlink"), yardstick=False)
    placement = place_episode(GraphPlacementPolicy(TINY), episode, keep_heuristic=False)
    assert placement.extra["placer"]["groups"] == MAX_GROUPS
    assert len(placement.nodes) == len(graph.nodes) and np.isfinite(placement.extra["placer"]["simulated_step_time"])


def test_on_a_deep_graph_the_chain_from_the_heuristic_still_starts_from_its_very_placement(tmp_path):
    """A 24-layer Llama on 8 H100s: split where m-ETF cuts them, the groups would be 296, over
    MAX_GROUPS; parts on one device are merged back instead of dropping the split, so the start is
    still the heuristic's placement (projected on unsplit groups it was 1.2x slower on Llama-2-7B)."""
    import graphs
    from placer.policy.gnn.features import MAX_GROUPS

    graphs.export("llama", tmp_path / "llama.onnx", layers=24, seq_len=256)
    episode = make_episode(load_graph(tmp_path / "llama.onnx"), load_cluster("8xh100-nvlink"))
    assert episode.features.n_groups == MAX_GROUPS
    assert (episode.start[episode.node_group] == episode.best_assign).all()
    assert episode.step_times(episode.start[None])[0] == episode.best_time
