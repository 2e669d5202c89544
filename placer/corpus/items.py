"""Corpus items: a graph on a cluster, for learning (`training_items`) and for judging what was
learned on what it never saw (`held_out_items`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from placer.corpus.clusters import catalogue_clusters, sample_cluster, signature
from placer.corpus.sources import FAMILIES, LARGE_HELD_OUT, GraphSource, family_sources, zoo_source
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster, catalogue_names

# Never learned on: judged zero-shot. The transformer family (attention: an op mix the other zoo
# models lack) and the models from outside the zoo; the DGX-1's NVLink cube-mesh and the two
# machines over 25 GbE (a network link between GPU pairs, which no training catalogue cluster has).
HELD_OUT_FAMILIES: tuple[str, ...] = ("transformer", "outside")
HELD_OUT_CLUSTERS: tuple[str, ...] = ("dgx1-v100", "2x2gpu-25gbe")
TRAINING_FAMILIES: tuple[str, ...] = tuple(f for f in FAMILIES if f not in HELD_OUT_FAMILIES)
SIZES = ("small", "full")
# held_out_items also takes "large": deep graphs of 968 to 1,928 ops on the clusters large models run on
HELD_OUT_SIZES = (*SIZES, "large")
LARGE_CLUSTERS: tuple[str, ...] = ("8xh100-nvlink", "4xa100-nvlink", "dgx1-v100")
# a training graph meets this many clusters per pass: half from the catalogue, half sampled
CLUSTERS_PER_GRAPH = {"small": 2, "full": 4}
# the training cluster a held-out graph is judged on: the paper's own machine
UNSEEN_GRAPH_CLUSTER = "paper-4xk40"


@dataclass
class CorpusItem:
    """One placement problem: a graph, the cluster to place it on and the objective."""

    name: str
    family: str
    graph: OpGraph
    cluster: Cluster
    objective: str = "inference"


def _check_size(size: str, sizes: tuple[str, ...] = SIZES) -> None:
    if size not in sizes:
        raise PlacerError(f"unknown corpus size {size!r}; use one of {', '.join(sizes)}")


def training_clusters() -> list[Cluster]:
    """The catalogue's clusters that are not held out."""
    return catalogue_clusters([n for n in catalogue_names() if n not in HELD_OUT_CLUSTERS])


def held_out_signatures() -> tuple[tuple, ...]:
    """The hardware of the held-out clusters, which no sampled training cluster may have."""
    return tuple(signature(c) for c in catalogue_clusters(list(HELD_OUT_CLUSTERS)))


def training_sources(size: str, seed: int = 0) -> list[GraphSource]:
    _check_size(size)
    return [s for family in TRAINING_FAMILIES for s in family_sources(family, size, seed)]


def training_items(seed: int = 0, size: str = "small") -> Iterator[CorpusItem]:
    """One pass over the training corpus, in an order drawn from `seed`: every training graph on
    `CLUSTERS_PER_GRAPH[size]` clusters (catalogue clusters that are not held out, and clusters
    sampled around the catalogue that never have a held-out cluster's hardware). Graphs load as
    they are reached; a family or a cluster of the held-out lists never appears."""
    _check_size(size)
    rng = np.random.default_rng([seed, 2029])
    catalogue = training_clusters()
    avoid = held_out_signatures()
    pairs: list[tuple[GraphSource, Cluster]] = []
    for source in training_sources(size, seed):
        k = CLUSTERS_PER_GRAPH[size]
        picked = [catalogue[int(i)] for i in rng.choice(len(catalogue), size=(k + 1) // 2, replace=False)]
        picked += [sample_cluster(rng, avoid=avoid) for _ in range(k // 2)]
        pairs += [(source, cluster) for cluster in picked]
    for i in rng.permutation(len(pairs)):
        source, cluster = pairs[int(i)]
        yield CorpusItem(f"{source.name}@{cluster.name}", source.family, source.load(), cluster)


def held_out_items(seed: int = 0, size: str = "small") -> list[CorpusItem]:
    """Problems the training corpus never has: the held-out families' graphs on a training
    cluster (an unseen graph) and on the held-out clusters (both unseen), and a training family's
    graph on the held-out clusters (unseen hardware: Inception-v3 in "full", a random DAG drawn
    away from the training ones in "small"). `seed` only moves that random DAG. "large" is
    `LARGE_HELD_OUT`'s deep graphs on `LARGE_CLUSTERS` (two training clusters, one held out)."""
    _check_size(size, HELD_OUT_SIZES)
    if size == "large":
        sources = [zoo_source(family, options) for family, options in LARGE_HELD_OUT]
        return [CorpusItem(f"{s.name}@{c.name}", s.family, s.load(), c)
                for s in sources for c in catalogue_clusters(list(LARGE_CLUSTERS))]
    unseen_graphs = [s for family in HELD_OUT_FAMILIES for s in family_sources(family, size, seed)]
    held_clusters = catalogue_clusters(list(HELD_OUT_CLUSTERS))
    seen_graphs = [zoo_source("inception_v3", {"batch": 1})] if size == "full" else \
        family_sources("random_dag", size, seed + 10_000)[:1]
    pairs = [(s, c) for s in unseen_graphs for c in (*catalogue_clusters([UNSEEN_GRAPH_CLUSTER]), *held_clusters)]
    pairs += [(s, c) for s in seen_graphs for c in held_clusters]
    return [CorpusItem(f"{s.name}@{c.name}", s.family, s.load(), c) for s, c in pairs]
