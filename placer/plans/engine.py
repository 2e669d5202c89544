"""Plans measured as placements are: `PlanEngine` opens a plan that splits ops in an engine of its
own lowered graph (`runnable`), fed the source's inputs cut as the plan cuts them, and anything
else (a placement, a plan that splits nothing) in the engine it wraps. ONNX Runtime runs a lowered
graph as any placed one, so the plans whose devices never talk (data parallelism: a session per
device on its slice of the batch, a placement or pipeline stages within each); the torch engine
runs every plan, its collectives on `placer.kernels.collectives`. The measurer, the rounds
and their verdicts hold it as any engine, so plans and placements are timed side by side."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from placer.engines import make_engine
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement
from placer.plans.lower import lower
from placer.plans.plan import Plan
from placer.plans.runnable import runnable

NOT_IN_ORT = ("ONNX Runtime runs the plans whose devices never talk (data parallelism: each device a session "
              "on its slice of the batch), and this one has collectives, which have no ONNX ops; run it with "
              "--engine torch")


def check_runs(engine: str, pipeline: Any = None, graph: OpGraph | None = None, plan: Plan | None = None) -> None:
    """What running a plan that splits ops (`plan` of `graph`, when given) needs, refused in one
    line when missing (a training step runs in the torch engine alone, which the engines check)."""
    if engine != "torch" and graph is not None and plan is not None and talks(graph, plan):
        raise PlacerError(NOT_IN_ORT)
    if pipeline is not None and getattr(pipeline, "pipelined", False):
        raise PlacerError("a plan that splits ops runs one batch a step, not micro-batches; drop --micro-batches")


def talks(graph: OpGraph, plan: Plan) -> bool:
    """Whether the plan's devices exchange data (its lowered graph has collectives' steps)."""
    return bool(lower(graph, plan).helpers)


def check_devices(plan: Plan, devices: list[str]) -> None:
    """A plan's devices are among those it runs on, or it is refused in one line."""
    outside = [d for d in plan.devices if d not in devices]
    if outside:
        raise PlacerError(f"the plan uses {', '.join(outside)}, which are not among the devices given "
                          f"({', '.join(devices)}); give --devices that include them, or a plan made for these")


class PlanEngine:
    """`base` (an engine of `graph` fed `inputs`) that also opens plans (see the module doc)."""

    def __init__(self, base: Any, graph: OpGraph, inputs: Mapping[str, np.ndarray]) -> None:
        self.base, self.graph, self.inputs = base, graph, dict(inputs)
        self.name, self.devices, self.live_node_times = base.name, base.devices, base.live_node_times
        self.folded_nodes, self.prepared = base.folded_nodes, base.prepared

    def open(self, item: Placement | Plan):
        if isinstance(item, Plan) and item.is_placement:
            item = item.to_placement()
        if isinstance(item, Placement):
            return self.base.open(item)
        training = getattr(self.base, "training", None)
        check_runs(self.base.name, getattr(self.base, "pipeline", None))
        made = runnable(self.graph, item, training=training is not None)
        if self.base.name != "torch" and made.lowered.helpers:
            raise PlacerError(NOT_IN_ORT)
        engine = make_engine(self.base.name, made.graph, self.devices, made.feeds(self.inputs),
                             training=made.training(training) if training is not None else None,
                             timeout_s=getattr(self.base, "timeout_s", 60.0))
        return engine.open(made.placement)

    def record(self) -> dict[str, Any]:
        return self.base.record()

    def control_flow(self, since: dict | None = None) -> dict[str, dict[str, int]]:
        return self.base.control_flow(since)


def measures_plans(measurer: Any) -> Any:
    """`measurer` (a `RealMeasurer`) measuring plans too; the same measurer, its engine wrapped."""
    if not isinstance(measurer.engine, PlanEngine):
        measurer.engine = PlanEngine(measurer.engine, measurer.graph, measurer.inputs)
    return measurer

