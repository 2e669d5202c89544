"""The cluster jobs: the catalogue's clusters listed, and one cluster with the route a copy takes
between every pair of its devices (`placer cluster list` and `show`; `describe_local` writes one)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Route:
    """How a copy goes from `source` to `target`: the links it crosses, the bandwidth of the
    slowest and their summed latency (`placer.hardware.route_figures`)."""

    source: str
    target: str
    links: tuple
    bandwidth_Bps: float
    latency_s: float

    @property
    def how(self) -> str:
        """"direct" (one link of two members), "shared bus" (one of more), else "N links"."""
        if len(self.links) == 1:
            return "direct" if len(self.links[0].members) == 2 else "shared bus"
        return f"{len(self.links)} links"


@dataclass(frozen=True)
class ClusterRoutes:
    """A cluster, the route of every pair of its devices, and the links on several pairs' routes
    (copies at once share them) with how many, the most shared first."""

    cluster: Any
    routes: list[Route]
    shared_links: list[tuple[str, int]]


def list_clusters() -> list:
    """The catalogue's clusters, loaded."""
    from placer.hardware import catalogue_names, load_cluster

    return [load_cluster(name) for name in catalogue_names()]


def cluster_routes(name_or_path: str) -> ClusterRoutes:
    """The cluster (a catalogue name or a TOML file) with its routes."""
    from placer.hardware import load_cluster, route_figures

    cluster = load_cluster(name_or_path)
    names = cluster.device_names
    routes = []
    for i, source in enumerate(names):
        for target in names[i + 1:]:
            links = cluster.route(source, target)
            latency, bandwidth = route_figures(links)
            routes.append(Route(source, target, links, bandwidth, latency))
    users = Counter(link.name for route in routes for link in route.links)
    return ClusterRoutes(cluster, routes, [(name, n) for name, n in users.most_common() if n > 1])
