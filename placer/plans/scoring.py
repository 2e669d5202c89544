"""A plan search's evaluator: each plan lowered and simulated once (`pricing.simulate_plan`),
counted against a budget of simulated plans (`samples`), served from a cache after that.

A plan that does not fit a device's memory, or that cannot be lowered, scores infinity: no
search takes it. The seconds spent simulating are kept, so a search reports plans per second
(lowering and simulating one costs tens of milliseconds on the zoo's models, so it matters).
"""

from __future__ import annotations

import math
import time

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster
from placer.measure.measurement import Measurement
from placer.plans.plan import Plan
from placer.plans.pricing import simulate_plan
from placer.plans.space import plan_key


class PlanScorer:
    """Step times of plans of `graph` on `cluster`, at most `samples` simulated."""

    def __init__(self, graph: OpGraph, cluster: Cluster, samples: int) -> None:
        if samples < 1:
            raise PlacerError(f"a plan search needs at least 1 sample, not {samples}")
        self.graph, self.cluster, self.samples = graph, cluster, samples
        self.cache: dict[tuple, Measurement | None] = {}
        self.seconds = 0.0

    @property
    def simulated(self) -> int:
        return len(self.cache)

    @property
    def spent(self) -> bool:
        return self.simulated >= self.samples

    def known(self, plan: Plan) -> bool:
        return plan_key(self.graph, plan) in self.cache

    def time(self, plan: Plan) -> float:
        """The plan's simulated step time (infinity where it fails); a new plan costs a sample."""
        m = self.measurement(plan)
        return m.step_time if m is not None and m.ok else math.inf

    def measurement(self, plan: Plan) -> Measurement | None:
        key = plan_key(self.graph, plan)
        if key not in self.cache:
            start = time.perf_counter()
            try:
                self.cache[key] = simulate_plan(self.graph, plan, self.cluster)
            except PlacerError:   # a layout the lowering cannot make: no plan to take
                self.cache[key] = None
            self.seconds += time.perf_counter() - start
        return self.cache[key]

    @property
    def plans_per_second(self) -> float:
        return self.simulated / self.seconds if self.seconds > 0 else 0.0
