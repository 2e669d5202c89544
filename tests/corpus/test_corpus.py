"""The corpus: held-out families and clusters never reach training; sampled clusters are real
hardware descriptions (every device reaches every other, a placement over all of them simulates);
random DAGs are ONNX models placer loads as a user's file."""

from __future__ import annotations

import numpy as np
import pytest

from placer.corpus import HELD_OUT_CLUSTERS, HELD_OUT_FAMILIES, held_out_items, sample_cluster, training_items
from placer.corpus.clusters import MAX_DEVICES, MIN_DEVICES, catalogue_clusters, signature, write_cluster
from placer.hardware import load_cluster
from placer.corpus.items import held_out_signatures
from placer.corpus.random_dags import DagSpec, random_dag
from placer.costmodel.roofline import cluster_measurer
from placer.errors import PlacerError
from placer.graph.load import load_graph
from placer.placement import Placement


@pytest.fixture(scope="module")
def training():
    return [item for seed in (0, 1) for item in training_items(seed, "small")]


@pytest.fixture(scope="module")
def held_out():
    return held_out_items(0, "small")


def test_no_held_out_family_or_cluster_is_ever_a_training_item(training):
    held_hardware = set(held_out_signatures())
    assert training
    for item in training:
        assert item.family not in HELD_OUT_FAMILIES, item.name
        assert item.cluster.name not in HELD_OUT_CLUSTERS, item.name
        assert signature(item.cluster) not in held_hardware, item.name


def test_no_held_out_graph_is_a_training_graph(training, held_out):
    """In "small" none is: the held-out families' graphs, and the training family's graph judged on
    the held-out clusters, a random DAG drawn away from the training ones (in "full" that one is
    Inception-v3, a training graph: those items hold out the hardware alone)."""
    trained = {item.graph.sha256 for item in training}
    assert any(item.family not in HELD_OUT_FAMILIES for item in held_out)
    for item in held_out:
        assert item.graph.sha256 not in trained, item.name


def test_every_held_out_item_is_unseen_and_every_held_out_name_is_judged(held_out):
    for item in held_out:
        assert item.family in HELD_OUT_FAMILIES or item.cluster.name in HELD_OUT_CLUSTERS, item.name
    assert {i.family for i in held_out} >= set(HELD_OUT_FAMILIES)
    assert {i.cluster.name for i in held_out} >= set(HELD_OUT_CLUSTERS)
    # unseen graphs on seen hardware, seen families on unseen hardware, and both unseen
    assert any(i.family in HELD_OUT_FAMILIES and i.cluster.name not in HELD_OUT_CLUSTERS for i in held_out)
    assert any(i.family not in HELD_OUT_FAMILIES and i.cluster.name in HELD_OUT_CLUSTERS for i in held_out)


def test_training_mixes_families_catalogue_and_sampled_clusters_and_is_seeded(training):
    families = {item.family for item in training}
    assert {"random_dag", "resnet50", "rnnlm", "nmt"} <= families
    names = {item.cluster.name for item in training}
    assert any(n.startswith("sampled-") for n in names) and any(not n.startswith("sampled-") for n in names)
    again = [item.name for item in training_items(0, "small")]
    assert again == [item.name for item in training[:len(again)]]
    # another seed, another order of the same zoo graphs, and other clusters for them
    zoo = [[(i.name.split("@")[0], i.cluster.name) for i in part if i.family != "random_dag"]
           for part in (training[:len(again)], training[len(again):])]
    assert sorted(g for g, _ in zoo[0]) == sorted(g for g, _ in zoo[1])
    assert [g for g, _ in zoo[0]] != [g for g, _ in zoo[1]] and sorted(zoo[0]) != sorted(zoo[1])


def test_an_unknown_size_is_a_one_line_error():
    with pytest.raises(PlacerError, match="unknown corpus size 'huge'; use one of small, full"):
        next(training_items(0, "huge"))


@pytest.mark.parametrize("n", range(MIN_DEVICES, MAX_DEVICES + 1))
def test_a_sampled_cluster_routes_between_all_its_devices_and_simulates_a_placement(n):
    cluster = sample_cluster(np.random.default_rng(n), n)
    names = cluster.device_names
    assert len(names) == n and any(d.model.kind == "cuda" for d in cluster.devices)
    for a in names:
        for b in names:
            route = cluster.route(a, b)
            assert (route == ()) == (a == b)
            # a copy never passes through a GPU
            inner = [m for link in route for m in link.members if m not in (a, b)]
            assert all(not m.startswith("cuda") for m in inner)
    graph = load_graph(random_dag(DagSpec("dense", 6, 3, 2, 64, 64), seed=n))
    nodes = list(graph.nodes)
    placement = Placement([f"{d}" for d in names], {v: names[i % n] for i, v in enumerate(nodes)})
    measurement = cluster_measurer(cluster, graph).measure(placement)
    assert measurement.ok and measurement.step_time > 0


def test_sampled_clusters_vary_and_are_drawn_from_the_seed():
    drawn = [sample_cluster(np.random.default_rng(s)) for s in range(12)]
    assert len({signature(c) for c in drawn}) > 6
    assert len({len(c.devices) for c in drawn}) > 3
    assert any(len({d.machine for d in c.devices}) == 2 for c in drawn)
    assert sample_cluster(np.random.default_rng(3)) == sample_cluster(np.random.default_rng(3))


def test_a_sampled_cluster_never_has_an_avoided_clusters_hardware():
    for s in range(20):
        # two devices: few layouts, so the draw is one that could come again; avoided, it never does
        drawn = signature(sample_cluster(np.random.default_rng(s), 2))
        assert signature(sample_cluster(np.random.default_rng(s), 2, avoid=(drawn,))) != drawn


def test_a_random_dag_is_a_checked_onnx_model_with_static_shapes_and_its_spec():
    spec = DagSpec("conv", depth=8, width=4, fan_in=3, size=16, rows=14)
    graph = load_graph(random_dag(spec, seed=5))
    ops = {node.op_type for node in graph.nodes.values()}
    assert "Conv" in ops and ops <= {"Conv", "Add", "Relu", "Concat"}
    assert len(graph.nodes) >= spec.depth
    assert all(node.flops >= 0 for node in graph.nodes.values())
    assert random_dag(spec, seed=5) == random_dag(spec, seed=5)
    assert random_dag(spec, seed=5) != random_dag(spec, seed=6)


def test_training_never_samples_a_cluster_with_held_out_hardware(monkeypatch):
    import placer.corpus.items as items

    sampled = {signature(i.cluster) for i in training_items(0, "small") if i.cluster.name.startswith("sampled-")}
    assert sampled
    # were those the held-out clusters' hardware, the same seed would draw others in their place
    monkeypatch.setattr(items, "held_out_signatures", lambda: tuple(sampled))
    redrawn = {signature(i.cluster) for i in training_items(0, "small") if i.cluster.name.startswith("sampled-")}
    assert redrawn and not redrawn & sampled


@pytest.mark.parametrize("seed", range(6))
def test_a_sampled_cluster_written_as_toml_loads_back_as_the_same_cluster(tmp_path, seed):
    cluster = sample_cluster(np.random.default_rng(seed))
    loaded = load_cluster(str(write_cluster(cluster, tmp_path / "sampled.toml")))   # every check load_cluster runs
    assert loaded == cluster
    assert [loaded.route(a, b) for a in loaded.device_names for b in loaded.device_names] == \
        [cluster.route(a, b) for a in cluster.device_names for b in cluster.device_names]


def test_a_cluster_with_its_own_model_is_written_with_that_models_figures(tmp_path):
    import dataclasses

    (cluster,) = catalogue_clusters(["paper-2xk40"])
    gpu = cluster.devices[1]
    faster = dataclasses.replace(gpu.model, key="k40-overclocked", peak_flops={"float32": 6e12})
    devices = (cluster.devices[0], dataclasses.replace(gpu, model=faster), *cluster.devices[2:])
    cluster = dataclasses.replace(cluster, devices=devices)
    assert load_cluster(str(write_cluster(cluster, tmp_path / "own.toml"))) == cluster


def test_the_large_held_out_graphs_are_never_training_graphs_and_are_deep():
    """held_out_items(size="large"): deep GPT-2-shaped Transformers (a held-out family) and the
    Llama-2-7B shape, whose options no training Llama has; the training corpus has Llamas too."""
    from placer.corpus.items import LARGE_CLUSTERS
    from placer.corpus.sources import LARGE_HELD_OUT, ZOO_FAMILIES

    assert any(options["layers"] >= 16 for options in ZOO_FAMILIES["llama"]["full"])
    for family, options in LARGE_HELD_OUT:
        assert options not in ZOO_FAMILIES.get(family, {}).get("full", []) + ZOO_FAMILIES.get(family, {}).get("small", [])
        assert options["layers"] >= 24
    assert {f for f, _ in LARGE_HELD_OUT} == {"transformer", "llama"}
    assert set(LARGE_CLUSTERS) & set(HELD_OUT_CLUSTERS) and set(LARGE_CLUSTERS) - set(HELD_OUT_CLUSTERS)
    with pytest.raises(PlacerError, match="use one of small, full, large"):
        held_out_items(0, "huge")
