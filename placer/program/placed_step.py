"""A graph's step placed on devices, as an engine runs it, and its memory, as the engine accounts it.

An engine's preparation of the graph (`placer.kernels.prepare`) decides two things: which nodes
still run every step (the others are folded into constants) and the bytes of every constant
(parameters and folded values, resident on each device that reads them). Given those, the rest
is plain data the engine and the placers share: the forward steps, a training step's plan
(`placer.program.training_plan`), a pipelined step's unrolling (`placer.program.pipeline`), the
per-device schedule (`placer.program.schedule`) and each device's predicted peak memory
(`PlacedStep.memory`), known before anything is loaded or run.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from placer.graph.opgraph import OpGraph
from placer.program.memory import MemoryEstimate, predict_peak_memory
from placer.program.pipeline import Pipeline, pipelined_plan, placed
from placer.program.schedule import Schedule, build_schedule
from placer.program.training import TrainingSpec
from placer.program.training_plan import TrainingPlan, copied_as, plan_training
from placer.program.walk import Step


@dataclass(frozen=True)
class PlacedStep:
    """One step of `graph` under a placement: its schedule and, for a training step, its plan."""

    graph: OpGraph
    schedule: Schedule
    constant_bytes: Mapping[str, int]   # parameter or folded tensor -> bytes
    plan: TrainingPlan | None = None    # None: an inference step
    training: TrainingSpec | None = None
    names: Mapping[str, str] = field(default_factory=dict)   # pipelined: a micro-batch's name -> its own

    def memory(self) -> dict[str, MemoryEstimate]:
        """Each device's predicted peak (`predict_peak_memory`). A training step also holds its
        gradients (each the size of its tensor), the activations its backward steps read, the
        optimizer state of the parameters the device updates, and a full copy of each updated
        parameter it receives."""
        plan, names, constant_bytes, tensors = self.plan, self.names, self.constant_bytes, self.graph.tensors

        def size(name: str) -> int:
            if plan is not None and name in plan.gradient_of:
                name = plan.gradient_of[name]
            if name in constant_bytes:
                return constant_bytes[name]
            info = tensors.get(names.get(name, name))
            return info.nbytes if info is not None else 0

        if plan is None:
            return predict_peak_memory(self.schedule, size)
        return predict_peak_memory(self.schedule, size, plan.state_bytes(self.training, size),
                                   lambda t: size(copied_as(t)))


def place_step(graph: OpGraph, assignment: dict[str, str], devices: list[str], running: Collection[str],
               constant_bytes: Mapping[str, int], training: TrainingSpec | None = None, *,
               host_inputs: Callable[[str], frozenset[int]] = lambda node: frozenset(),
               pipeline: Pipeline | None = None) -> PlacedStep:
    """The step of `graph`'s `running` nodes under `assignment` (node -> device) on `devices`,
    every other tensor a step reads being a constant of `constant_bytes` or a graph input; with
    `training`, its training step (`host_inputs`: as `plan_training`'s); with a `pipeline` of
    several micro-batches, all of them."""
    forward = [Step(n.name, n.op_type, n.inputs, n.outputs) for n in graph.nodes.values() if n.name in running]
    shared = set(constant_bytes)   # every micro-batch reads the constants as they are
    pipeline = pipeline if pipeline is not None and pipeline.pipelined else None
    plan, names = None, {}
    if training is None:
        steps, where, outputs = forward, assignment, [o.name for o in graph.outputs]
        if pipeline is not None:
            steps, where, u = placed(forward, assignment, outputs, shared, pipeline, devices)
            outputs, names = u.outputs, u.names
    else:
        plan = plan_training(graph, assignment, forward, training, host_inputs)
        if pipeline is not None:
            plan, u = pipelined_plan(plan, pipeline, shared, devices)
            names = u.names
        steps, where, outputs = plan.steps, plan.assignment, plan.outputs
    inputs = {i.name for i in graph.inputs}
    feeds = inputs | {new for new, old in names.items() if old in inputs}   # each micro-batch's inputs
    return PlacedStep(graph, build_schedule(steps, where, devices, shared, feeds, outputs), constant_bytes,
                      plan, training, names)
