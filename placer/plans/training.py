"""A plan's training step, priced by the machinery that prices a placement's: the plan's forward
step lowered (`lower.py`), its replicated weights one copy per device (`replicas.py`), the training
program placer builds for any placed graph (`placer.costmodel.sim_program.training_program`: loss,
backward steps with gradients crossing the forward edges back, updates, optimizer state), sharded
weights gathered again for the backward pass and their gradients reduce-scattered
(`fsdp_backward.py`), the replicas' gradients all-reduced in buckets beside the backward pass
(`grad_sync.py`), and the simulator over it all, with the devices' caps.

Why this shape rather than a training step written anew for plans: the loss, the backward steps,
the saved activations, the optimizer state and the memory from lifetimes are the ones every
placement's training step already has; only the gradients' collectives are new.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from placer.costmodel.roofline import RooflineCostModel, cluster_measurer
from placer.costmodel.sim_program import SimProgram, training_program
from placer.costmodel.simulator import SimulatedMeasurer
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster
from placer.measure.measurement import Measurement
from placer.placement import Placement
from placer.plans.grad_sync import DDP_BUCKET_BYTES, with_gradient_sync
from placer.plans.lower import lower
from placer.plans.plan import Plan
from placer.plans.lowered import Lowered
from placer.plans.pricing import PlanCostModel, plan_cost
from placer.plans.fsdp_backward import with_fsdp_backward
from placer.plans.replicas import own_copies
from placer.program.training import TrainingSpec


def simulate_training(graph: OpGraph, plan: Plan, cluster: Cluster, training: TrainingSpec,
                      bucket_bytes: int = DDP_BUCKET_BYTES) -> Measurement:
    """`plan`'s simulated training step on `cluster` with the roofline costs (failed where a
    device's peak memory, weights, gradients, optimizer state and saved activations, exceeds its
    capacity)."""
    measurer, placement = training_measurer(graph, plan, cluster, training, bucket_bytes)
    return measurer.measure(placement)


def training_measurer(graph: OpGraph, plan: Plan, cluster: Cluster, training: TrainingSpec,
                      bucket_bytes: int = DDP_BUCKET_BYTES) -> tuple[SimulatedMeasurer, Placement]:
    """The measurer of `plan`'s training step on `cluster`, and the placement of its lowered graph."""
    step = plan_training_step(graph, plan, cluster, training, bucket_bytes)
    measurer = cluster_measurer(cluster, step.lowered.graph, step.cost, training=step.spec, program=step.program)
    return measurer, step.lowered.placement


@dataclass
class PlanTrainingStep:
    """A plan's training step as the simulator takes it: the lowered graph (replicas their own
    weights), its costs, the training spec in the lowered graph's names and the program."""

    lowered: Lowered
    cost: PlanCostModel
    spec: TrainingSpec
    program: SimProgram


def plan_training_step(graph: OpGraph, plan: Plan, cluster: Cluster, training: TrainingSpec,
                       bucket_bytes: int = DDP_BUCKET_BYTES) -> PlanTrainingStep:
    """`plan`'s training step on `cluster`: lowered, priced with the roofline, its program with the
    sharded weights' and the replicas' gradient collectives."""
    lowered, copies = own_copies(lower(graph, plan))
    cost = plan_cost(lowered, lambda g: RooflineCostModel(cluster, g))
    devices = [d.name for d in cluster.devices]
    spec = _renamed_targets(training, graph, lowered.graph)
    program = training_program(lowered.graph, devices, cost, spec)
    stored = plan.extra.get("placer", {}).get("stored", {})
    if stored:
        program = with_fsdp_backward(program, lowered.graph, lowered.placement, devices, stored, cost.launch_time)
    program = with_gradient_sync(program, lowered.graph, lowered.placement, devices, copies, cost.launch_time,
                                 bucket_bytes)
    return PlanTrainingStep(lowered, cost, spec, program)


def _renamed_targets(training: TrainingSpec, graph: OpGraph, lowered: OpGraph) -> TrainingSpec:
    """`training` with its targets named as the lowered graph's outputs (an output's pieces,
    `<output>@<device>` or `<output>/...@<device>`, each take its output's target): the loss reads those."""
    if not training.targets:
        return training
    sources = [o.name for o in graph.outputs if o.name in training.targets]
    renamed = {o.name: training.targets[s] for o in lowered.outputs for s in sources
               if o.name == s or o.name.startswith((f"{s}@", f"{s}/"))}
    return replace(training, targets=renamed)
