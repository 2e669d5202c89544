"""A plan's step time and per-device peak memory: its lowered graph and placement simulated by the
simulator placer already has (`placer.costmodel.simulator`), with the cluster's costs of the
lowered ops, so that a shard is priced by its own sizes and a collective by its ring's copies over
the devices' routes, queued on shared links with every other copy. Memory caps are the devices'.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace

from placer.costmodel.protocol import CostModel, op_times
from placer.costmodel.roofline import RooflineCostModel, cluster_measurer
from placer.graph.opgraph import OpGraph, OpNode
from placer.hardware import Cluster
from placer.measure.measurement import Measurement
from placer.plans.lower import lower
from placer.plans.lowered import HelperCost, Lowered
from placer.plans.plan import Plan


class PlanCostModel:
    """`base`'s costs of a lowered graph, with the layout changes' steps priced as `Lowered.helpers`
    says: a collective's launch as an op that computes and moves nothing, its other steps free
    (their time is their copies, which `base` prices as any copy over the route); where `base` has
    the step profiled at its shapes (this machine's devices, `shard_profile`), as profiled."""

    def __init__(self, base: CostModel, helpers: dict[str, HelperCost]) -> None:
        self.base, self.helpers = base, helpers
        self.devices = base.devices

    def __getattr__(self, name: str):   # the base's other figures (contention, objective) hold as they are
        return getattr(self.base, name)

    def op_time(self, node: OpNode, device: str) -> float:
        cost = self.helpers.get(node.name)
        if cost is None:
            return self.base.op_time(node, device)
        # on this machine's devices, a step profiled at its shapes (`shard_profile`): its kernel's time
        profiled = getattr(self.base, "helper_time", None)
        timed = profiled(node, device) if profiled is not None else None
        if timed is not None:
            return timed
        if cost is HelperCost.FREE:
            return 0.0
        return self.launch_time(node, device)

    def op_times(self, node: OpNode, devices: list[str]) -> list[float]:
        """`op_time` on each of `devices`: the base's at once for an op of the graph (see `op_times`)."""
        cost = self.helpers.get(node.name)
        if cost is None:
            return op_times(self.base, node, devices)
        if getattr(self.base, "helper_time", None) is not None:   # profiled per device
            return [self.op_time(node, d) for d in devices]
        if cost is HelperCost.FREE:
            return [0.0] * len(devices)
        return op_times(self.base, _launched(node), devices)   # a launch is priced once per device model

    def launch_time(self, node: OpNode, device: str) -> float:
        """A collective's kernel launch on `device`: `node` as an op that computes and moves nothing."""
        return self.base.op_time(_launched(node), device)

    def training_step_time(self, step: str, kind: str, node: OpNode, nbytes: int, device: str) -> float:
        """The base's, but a layout change's backward: the reverse change, priced as the change is
        (its copies go back over the forward edges, as every gradient does)."""
        if kind == "backward" and node.name in self.helpers:
            return self.op_time(node, device)
        return self.base.training_step_time(step, kind, node, nbytes, device)

    def transfer_time(self, nbytes: int, src: str, dst: str) -> float:
        return self.base.transfer_time(nbytes, src, dst)

    def route(self, src: str, dst: str) -> tuple[str, ...]:
        return self.base.route(src, dst)


def _launched(node: OpNode) -> OpNode:
    """`node` as an op that computes and moves nothing: what its launch costs."""
    return replace(node, name=f"{node.name}#launch", inputs=(), output_info=(), flops=0.0, param_bytes=0)


def plan_cost(lowered: Lowered, base: Callable[[OpGraph], CostModel]) -> PlanCostModel:
    """The costs of `lowered`, from `base` built over its graph (its shards' own tensors)."""
    return PlanCostModel(base(lowered.graph), lowered.helpers)


@contextmanager
def gc_paused():
    """No garbage collection while a plan is lowered and simulated: a 70B model's plan builds
    millions of objects, none of them in cycles worth finding, and the collector's passes over them
    took 40% of its time (8.4 s -> 5.7 s). What is left is collected once it ends."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def simulate_plan(graph: OpGraph, plan: Plan, cluster: Cluster) -> Measurement:
    """`plan`'s simulated step on `cluster` with the roofline costs (failed where a device's peak
    memory exceeds its capacity, the reason saying which), as `cluster_measurer` measures a placement."""
    with gc_paused():
        lowered = lower(graph, plan, runnable=False)   # priced, never run
        cost = plan_cost(lowered, lambda g: RooflineCostModel(cluster, g))
        return cluster_measurer(cluster, lowered.graph, cost).measure(lowered.placement)


class SourceCosts:
    """The source graph's costs (a profile, which knows the source's ops by name) read for its
    lowered graph: a whole op as itself; a shard as timed at its own shapes where the base has it
    (`shard_profile.ShardProfiled`), else as its op's time times its share of the op's work (its
    FLOPs over the op's, else one n-th); a collective's launch as nothing (on CPU devices, which
    share memory, a step's hand-over is the transfer the base prices)."""

    def __init__(self, base: CostModel, source: OpGraph, lowered: Lowered) -> None:
        self.base, self.source, self.lowered = base, source, lowered
        self.devices = base.devices
        self._ways = Counter(lowered.shard_of.values())   # op -> how many shards it has
        # a shard profiled at its own shapes (`placer.plans.shard_profile`), where the base has them
        self._shard_time = getattr(base, "shard_time", None)

    def __getattr__(self, name: str):
        return getattr(self.base, name)

    def op_time(self, node: OpNode, device: str) -> float:
        name = self.lowered.shard_of.get(node.name, node.name)
        op = self.source.nodes.get(name)
        if op is None:
            return 0.0
        t = self.base.op_time(op, device)
        if name == node.name:
            return t
        timed = self._shard_time(node, name, device) if self._shard_time is not None else None
        if timed is not None:
            return timed
        return t * (node.flops / op.flops if op.flops else 1.0 / self._ways[name])


def predict_plan(graph: OpGraph, plan: Plan, base: CostModel) -> Measurement:
    """`plan`'s forward step predicted from `base`, the costs of `graph` on the plan's devices (a
    profile of this machine), as the simulator predicts a placement's."""
    from placer.costmodel.simulator import SimulatedMeasurer

    lowered = lower(graph, plan)
    cost = plan_cost(lowered, lambda g: SourceCosts(base, graph, lowered))
    return SimulatedMeasurer(lowered.graph, list(lowered.placement.devices), cost).measure(lowered.placement)

