"""A plan search's evaluator: each plan lowered and simulated once, its inference step
(`pricing.simulate_plan`) or, given a `TrainingSpec`, its training step (`training.simulate_training`),
counted against a budget of simulated plans (`samples`), served from a cache after that.

On a training step, a plan that splits no op is a placement, and is priced as a comparison prices a
placement's training step (`placer.costmodel.roofline.cluster_measurer`: each weight once, on its
device, sent to readers elsewhere), not as a lowered plan (a copy of the weight on each reading
device, their gradients all-reduced): so a placement the search starts from scores as its row
does, and the search is never slower than that row.

A plan that does not fit a device's memory, or that cannot be lowered, scores infinity: no
search takes it. Many plans at once (`times`, a learner's batch) are simulated together on the
inference step (`batch_pricing.PlanBatchSimulator`: the same figures, thousands a second where
they share their splits); a training step, or a subclass's own pricing, one at a time. The seconds spent simulating are kept, so a search reports plans per second
(lowering and simulating one costs tens of milliseconds on the zoo's models, so it matters).
"""

from __future__ import annotations

import math
import time

from placer.costmodel.roofline import RooflineCostModel, cluster_measurer
from placer.costmodel.simulator import SimulatedMeasurer
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster
from placer.measure.measurement import Measurement
from placer.plans.batch_pricing import PlanBatchSimulator
from placer.plans.plan import Plan
from placer.plans.pricing import gc_paused, predict_plan, simulate_plan
from placer.plans.space import device_speeds, plan_key
from placer.plans.training import simulate_training
from placer.program.training import TrainingSpec


class PlanScorer:
    """Step times of plans of `graph` on `cluster` (training steps with `training`), at most `samples` simulated."""

    def __init__(self, graph: OpGraph, cluster: Cluster, samples: int, training: TrainingSpec | None = None) -> None:
        if samples < 1:
            raise PlacerError(f"a plan search needs at least 1 sample, not {samples}")
        self.graph, self.cluster, self.samples, self.training = graph, cluster, samples, training
        self.cache: dict[tuple, Measurement | None] = {}
        self.seconds = 0.0
        self._placements: SimulatedMeasurer | None = None   # built once, for the plans that are placements
        self._batch: PlanBatchSimulator | None = None
        self._time_only: set[tuple] = set()   # plans cached from a batch: a step time, no peaks yet

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
        return self._time(plan_key(self.graph, plan), plan)

    def _time(self, key: tuple, plan: Plan) -> float:
        m = self.cache[key] if key in self.cache else self.measurement(plan)
        return m.step_time if m is not None and m.ok else math.inf

    def times(self, plans: list[Plan]) -> list[float]:
        """`time` of each plan in turn, the new ones simulated together where they can be; it stops
        (a shorter list) at the first new plan past the budget, as calling `time` in turn would."""
        keys, todo = [plan_key(self.graph, p) for p in plans], {}
        for k, (key, plan) in enumerate(zip(keys, plans)):
            if key not in self.cache and key not in todo:
                if self.simulated + len(todo) >= self.samples:
                    keys = keys[:k]
                    break
                todo[key] = plan
        if todo and self._batchable():
            start = time.perf_counter()
            self._batch = self._batch or PlanBatchSimulator(self.graph, self.cluster)
            found = self._batch.step_times(list(todo.values()))   # collection paused inside
            self.seconds += time.perf_counter() - start
            for (key, plan), t in zip(todo.items(), found.tolist()):
                if math.isfinite(t):
                    self.cache[key] = Measurement(ok=True, step_time=t, spread=0.0, times=[t])
                    self._time_only.add(key)
                else:   # its failure's reason, or a layout it cannot make, from the plan alone
                    self.measurement(plan)
        return [self._time(key, plan) for key, plan in zip(keys, plans)]

    def _batchable(self) -> bool:
        """Whether plans are priced as `simulate_plan` prices them (so the batched pass gives the same)."""
        return self.training is None and type(self)._simulate is PlanScorer._simulate

    def measurement(self, plan: Plan) -> Measurement | None:
        key = plan_key(self.graph, plan)
        if key in self._time_only:   # asked for its peaks (a search's result): simulated alone, no new sample
            self._time_only.discard(key)
            del self.cache[key]
        if key not in self.cache:
            start = time.perf_counter()
            try:
                with gc_paused():
                    self.cache[key] = self._simulate(plan)
            except PlacerError:   # a layout the lowering cannot make: no plan to take
                self.cache[key] = None
            self.seconds += time.perf_counter() - start
        return self.cache[key]

    def _simulate(self, plan: Plan) -> Measurement:
        if self.training is None:
            return simulate_plan(self.graph, plan, self.cluster)
        if plan.is_placement and not plan.extra.get("placer", {}).get("stored"):
            if self._placements is None:
                self._placements = cluster_measurer(self.cluster, self.graph, training=self.training)
            return self._placements.measure(plan.to_placement())
        return simulate_training(self.graph, plan, self.cluster, self.training)

    def device_speeds(self, devices: list[str]) -> dict[str, float]:
        """Each device's speed on the graph (the searches' splits by speed): the cluster's roofline."""
        return device_speeds(self.graph, RooflineCostModel(self.cluster, self.graph), devices)

    @property
    def plans_per_second(self) -> float:
        return self.simulated / self.seconds if self.seconds > 0 else 0.0


class ProfiledPlanScorer(PlanScorer):
    """Plans of `graph` on this machine's devices, each forward step predicted from `cost` (a
    profile of the graph's ops here: `pricing.predict_plan`, each shard its op's share), within
    `samples`: the search a comparison on these devices runs before measuring what it finds."""

    def __init__(self, graph: OpGraph, cost, samples: int) -> None:
        super().__init__(graph, None, samples)
        self.cost = cost

    def _simulate(self, plan: Plan) -> Measurement:
        return predict_plan(self.graph, plan, self.cost)

    def device_speeds(self, devices: list[str]) -> dict[str, float]:
        return device_speeds(self.graph, self.cost, devices)
