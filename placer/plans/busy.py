"""Each device's compute seconds in a plan's step on a described cluster: what a user balancing a
data-parallel batch over unequal GPUs measures on each worker before moving samples from the slow
ones to the fast ones (collectives, on their own stream, are left out: they are not the work a
worker's slice sets)."""

from __future__ import annotations

from collections import defaultdict

from placer.costmodel.roofline import RooflineCostModel
from placer.costmodel.sim_program import inference_program
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster
from placer.plans.lower import lower
from placer.plans.plan import Plan
from placer.plans.pricing import gc_paused, plan_cost
from placer.plans.training import plan_training_step
from placer.program.training import TrainingSpec


def device_busy(graph: OpGraph, plan: Plan, cluster: Cluster, training: TrainingSpec | None = None) -> dict[str, float]:
    """Device -> seconds its steps take in `plan`'s step on `cluster` (roofline costs): every
    forward op, and with `training` the loss, backward, gradient sums and updates too."""
    names = [d.name for d in cluster.devices]
    with gc_paused():
        if training is None:
            lowered = lower(graph, plan, runnable=False)
            program = inference_program(lowered.graph, names, plan_cost(lowered, lambda g: RooflineCostModel(cluster, g)))
        else:
            step = plan_training_step(graph, plan, cluster, training)
            lowered, program = step.lowered, step.program
    nodes, where = list(lowered.graph.nodes), lowered.placement.nodes
    busy: dict[str, float] = defaultdict(float)
    for i, (k, times) in enumerate(zip(program.node_of, program.times)):
        if i not in program.side:   # a collective's step, on the communication stream
            device = where[nodes[k]]
            busy[device] += times[names.index(device)]
    return dict(busy)
