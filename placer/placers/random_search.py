"""Random search: the best of N uniformly random group placements, the yardstick for learning.

It searches the learner's space (one device per group of the learner's default grouping) with
the learner's sample count, so the gap between the two is what learning is worth. Placements
are scored by the simulator on the cost model; one that runs out of memory or cannot run never
wins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

import numpy as np

from placer.errors import PlacerError
from placer.graph.grouping import Grouping, group_graph
from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.measure.measurement import INVALID
from placer.costmodel.batch_simulator import simulate_batch
from placer.costmodel.simulator import Simulator
from placer.costmodel.training_costs import TrainingStepCosts
from placer.placement import Placement
from placer.placers.base import (Caps, human_bytes, make_placement, over_caps, require_cost, require_devices,
                                 training_of)

CHUNK = 4096   # placements expanded to nodes and simulated per batch (`simulate_batch` splits it further)


class _Search:
    """One stream of random group placements and their simulated step times (inf: OOM or invalid)."""

    def __init__(self, graph: OpGraph, devices: list[str], cost: CostModel | None, caps: Caps | None,
                 seed: int, samples: int, grouping: Grouping | None, pipeline=None) -> None:
        require_devices(devices)
        cost = require_cost(cost, "random_search")
        if samples < 1:
            raise PlacerError(f"random_search needs at least 1 sample, not {samples}")
        self.graph, self.devices, self.caps = graph, devices, dict(caps or {})
        self.grouping = grouping or group_graph(graph, n_devices=len(devices))
        # The first N rows are the same for any total: numpy draws the matrix row by row.
        self.draws = np.random.default_rng(seed).integers(0, len(devices), size=(samples, len(self.grouping)))
        # the training objective: simulate the whole training step, not its per-node summary
        self.training = training_of(cost)
        inner = cost.inner if isinstance(cost, TrainingStepCosts) else cost
        sim = Simulator(graph, devices, inner, [self.caps.get(d) for d in devices], training=self.training,
                        pipeline=pipeline)
        group_of = np.array([self.grouping.node_group[n] for n in sim.node_names])
        self.failures: list[str | None] = []
        self.times = np.concatenate([self._simulate(sim, self.draws[i:i + CHUNK, group_of])
                                     for i in range(0, samples, CHUNK)])
        self.fits: Callable[[int], bool] = cache(self._fits_executor) if self.caps else lambda i: True

    def _simulate(self, sim: Simulator, assign: np.ndarray) -> np.ndarray:
        result = simulate_batch(sim, assign, peaks=False)   # the times and failures are all a search needs
        self.failures += result.failure
        return np.where([f is None for f in result.failure], result.step_time, np.inf)

    def placement_nodes(self, i: int) -> dict[str, str]:
        return self.grouping.expand(self.draws[i], self.devices).nodes

    def _fits_executor(self, i: int) -> bool:
        """The executor's own memory check, which refuses an over-cap placement before it runs."""
        return not over_caps(self.graph, Placement(list(self.devices), self.placement_nodes(i)), self.caps,
                             self.training)

    def best(self, n: int) -> int | None:
        """Index of the fastest placement that fits among the first `n` draws (None: none does)."""
        for i in np.argsort(self.times[:n], kind="stable"):
            if not np.isfinite(self.times[i]):
                return None
            if self.fits(int(i)):
                return int(i)
        return None

    def nothing_fits(self) -> PlacerError:
        """The one-line reason no draw won: the caps, or devices the ops cannot run on."""
        n = len(self.times)
        if self.caps and any(f != INVALID for f in self.failures):
            capped = ", ".join(f"{d}={human_bytes(c)}" for d, c in self.caps.items())
            return PlacerError(f"random_search: none of {n} random placements fits under the memory caps "
                               f"{capped}; raise the mem= caps, add devices or use a cap-respecting placer")
        return PlacerError(f"random_search: none of {n} random placements can run: each puts some op on a "
                           "device that cannot run it")


def random_search(graph: OpGraph, devices: list[str], cost: CostModel | None = None, caps: Caps | None = None,
                  *, seed: int = 0, samples: int = 1000, grouping: Grouping | None = None,
                  pipeline=None) -> Placement:
    """The fastest in the simulator of `samples` uniformly random group placements (seeded); with
    `pipeline`, scored on the pipelined step (`placer.program.pipeline`)."""
    search = _Search(graph, devices, cost, caps, seed, samples, grouping, pipeline)
    best = search.best(samples)
    if best is None:
        raise search.nothing_fits()
    return make_placement(graph, devices, search.placement_nodes(best), "random_search", seed=seed,
                          samples=samples, groups=len(search.grouping),
                          simulated_step_time=float(search.times[best]))


def random_search_curve(graph: OpGraph, devices: list[str], cost: CostModel, caps: Caps | None = None, *,
                        seed: int = 0, counts: Sequence[int] = (500, 2000, 8000),
                        grouping: Grouping | None = None) -> dict[int, float | None]:
    """Sample count -> best simulated step time among the first that many draws of one stream
    (None where nothing fits); the entry at N is what `random_search(samples=N)` finds."""
    search = _Search(graph, devices, cost, caps, seed, max(counts), grouping)
    best = {n: search.best(n) for n in counts}
    return {n: float(search.times[i]) if i is not None else None for n, i in best.items()}
