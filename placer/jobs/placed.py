"""What `run` and `measure` start from: a model under a placement on devices, every part checked
before any real work."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from placer.jobs.paths import check_writable
from placer.jobs.settings import HardwareSettings, ModelSettings, PlacementSettings, StepSettings


@dataclass(frozen=True)
class PlacedModel:
    """The graph (with the --inputs that feed every step), the placement checked against it, its
    devices, the step (training, pipeline) and per micro-batch the --inputs arrays of that
    micro-batch alone (`name#k`)."""

    graph: Any
    placement: Any
    devices: list
    training: Any
    pipeline: Any
    micro_batch_inputs: list


def placed_model(what: str, model: ModelSettings, placement: PlacementSettings, hardware: HardwareSettings,
                 step: StepSettings, writes: dict[str, Any], *, split_inputs: bool = False) -> PlacedModel:
    """The model under its placement for `what` (a job that runs it for real, "placer run"),
    checked in this order: the engine's options, each path of `writes` (option -> path; None: not
    asked for), the model, the placement, its devices. With `split_inputs`, the --inputs arrays
    `name#k` feed micro-batch k alone."""
    from placer.graph.placement_check import assignment
    from placer.placement import Placement

    step.check_engine()
    for option, path in writes.items():
        if path:
            check_writable(path, option)
    graph, micro_batch_inputs = model.load(step.micro_batches if split_inputs else 1)
    chosen = placement.to_run(graph)
    hardware.refuse_real(what)
    devices = hardware.devices_for(chosen)
    training, pipeline = step.training_spec(graph), step.pipeline()
    if isinstance(chosen, Placement):   # checked here, not as a failed measurement: a user's error
        assignment(graph, chosen, [d.name for d in devices])
    else:
        from placer.plans.engine import check_devices, check_runs

        check_runs(step.engine, pipeline, graph, chosen)
        check_devices(chosen, [d.name for d in devices])
    return PlacedModel(graph, chosen, devices, training, pipeline, micro_batch_inputs)
