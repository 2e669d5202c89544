"""The place job: place a model zero-shot with a pre-trained graph policy, in seconds.

`place(PlaceSettings(ModelSettings("inception_v3.onnx"), "dgx1-v100", "p.json"))` is what `placer
place` runs: no training, no measurement. The placement written records in extra["placer"] its
simulated step time beside the lower bound and the best list heuristic's
(`placer.policy.gnn.placing`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placer.errors import PlacerError
from placer.jobs.settings import ModelSettings, check_seed

# Chains sampled beside the policy's most likely ones: 192 score on Inception-v3 and a DGX-1 in
# about a second (sampling many and keeping the best is how neural combinatorial optimisation
# decodes, e.g. Kool et al. 2019); 256 found no more on the held-out problems
SAMPLED_CHAINS = 192
# Every chain is sampled and simulated in one batch held in memory (Inception-v3 on 10 devices: about
# 0.1 MB and 25 ms a chain on 2 cores), so --chains 10**9 ran out of memory after a minute; 16 times
# the 256 that found no more is past any use
MAX_CHAINS = 4096


@dataclass(frozen=True)
class PlaceSettings:
    """The model, the `cluster` to place for (a catalogue name or a TOML file), where to write the
    placement (`out`), the graph policy checkpoint (`policy`; None: the one shipped with placer),
    the `chains` sampled beside its most likely ones and their `seed`. Refused in one line on
    construction when the seed or the chains are out of range, or the cluster is missing."""

    model: ModelSettings
    cluster: str
    out: str | Path
    policy: str | None = None
    chains: int = SAMPLED_CHAINS
    seed: int = 0

    def __post_init__(self) -> None:
        check_seed(self.seed)
        if not 0 <= self.chains <= MAX_CHAINS:
            raise PlacerError(f"--chains must be from 0 to {MAX_CHAINS}, not {self.chains}: every chain is simulated "
                              "at once, in time and memory that grow with them, and past 256 the held-out problems "
                              "found nothing faster")
        if not self.cluster:
            raise PlacerError("placer place needs --cluster: the policy places for described hardware (placer "
                              "cluster list; placer cluster describe-local describes this machine)")


@dataclass(frozen=True)
class PlaceResult:
    """The placement written (its extra["placer"] holds every figure: the simulated step time, the
    lower bound, the best list heuristic's), where, on what, and the seconds placing took."""

    placement: Any
    path: Path
    graph: Any
    cluster: Any
    seconds: float


def place(settings: PlaceSettings) -> PlaceResult:
    """Place the model on the cluster with the policy, price it against the lower bound and the best
    list heuristic, and write it."""
    from placer.costmodel.lower_bound import lower_bound
    from placer.hardware import load_cluster
    from placer.policy.gnn.checkpoint import PRETRAINED, load_policy
    from placer.policy.gnn.episode import make_episode
    from placer.policy.gnn.placing import place_episode

    cluster = load_cluster(settings.cluster)
    policy, _ = load_policy(settings.policy or PRETRAINED)
    graph = settings.model.graph_only(weights="shapes")   # every figure is simulated
    started = time.monotonic()
    episode = make_episode(graph, cluster)   # the best list heuristic too: the policy improves on it as well
    placement = place_episode(policy, episode, seed=settings.seed, chains=settings.chains)
    placing_s = time.monotonic() - started
    info = placement.extra["placer"]
    found = episode.best_name is not None
    # how far from the physical limit, on the same costs and caps as compare --cluster's ratio_to_lower_bound
    bound = lower_bound(graph, cluster.device_names, episode.cost, caps=episode.caps).value
    info.update(policy=str(settings.policy or "pretrained"), cluster=cluster.name,
                seconds_to_place=round(placing_s, 3), best_heuristic=episode.best_name,
                best_heuristic_step_time=episode.best_time if found else None, lower_bound_step_time=bound,
                ratio_to_lower_bound=info["simulated_step_time"] / bound)
    path = Path(settings.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    placement.save(path)
    return PlaceResult(placement, path, graph, cluster, placing_s)
