"""The run job: one step of a model under a placement, its outputs kept — the way to check from
outside that a placement computes the same thing as any other.

`run(RunSettings(ModelSettings("model.onnx"), PlacementSettings(device="cpu")))` is what `placer run`
runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placer.jobs.placed import placed_model
from placer.jobs.settings import HardwareSettings, ModelSettings, PlacementSettings, StepSettings, check_seed


@dataclass(frozen=True)
class RunSettings:
    """The model, its placement, the devices and the step; the inputs --inputs leaves out are
    random from `seed` (micro-batch k's from seed + k); the outputs are written to `outputs` (an
    .npz) when given; `timeout_s` limits the step."""

    model: ModelSettings
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    hardware: HardwareSettings = field(default_factory=HardwareSettings)
    step: StepSettings = field(default_factory=StepSettings)
    outputs: str | Path | None = None
    seed: int = 0
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        check_seed(self.seed)


@dataclass(frozen=True)
class RunResult:
    """The step's outputs by name (a pipelined step's as `<output>#k`), or, when it failed, the
    `failure` kind and the `reason` (naming the inputs generated when a kernel failed)."""

    outputs: dict[str, Any]
    failure: str | None = None
    reason: str = ""


def run(settings: RunSettings) -> RunResult:
    """Run one step; write the outputs when `settings.outputs` names a file."""
    import numpy as np

    from placer.engines.failures import ExecutionFailure
    from placer.graph.feeds import generated_inputs, generated_note, step_feeds

    placed = placed_model("placer run", settings.model, settings.placement, settings.hardware, settings.step,
                          {"--outputs": settings.outputs}, split_inputs=True)
    graph, pipeline = placed.graph, placed.pipeline
    feeds = step_feeds(graph, settings.seed)   # --inputs, the rest random from the seed
    if pipeline.pipelined:
        # micro-batch k: random inputs from seed + k, then --inputs' `name` (every micro-batch) and `name#k`
        feeds = [{**step_feeds(graph, settings.seed + k), **placed.micro_batch_inputs[k]}
                 for k in range(pipeline.micro_batches)]
    try:
        outputs = _run_step(placed, feeds, settings.step.engine, settings.timeout_s)
    except ExecutionFailure as exc:
        generated = [n for n in generated_inputs(graph) if any(n not in own for own in placed.micro_batch_inputs)]
        return RunResult({}, exc.failure, f"{exc}{generated_note(generated) if exc.failure == 'kernel_error' else ''}")
    if settings.outputs:
        Path(settings.outputs).parent.mkdir(parents=True, exist_ok=True)   # check_writable found it can be made
        np.savez(settings.outputs, **outputs)
    return RunResult(outputs)


def _run_step(placed, feeds, engine: str, timeout_s: float | None) -> dict:
    """The step's outputs as arrays, run by `engine` (a plan that splits ops: its lowered graph)."""
    from dataclasses import replace

    from placer.placement import Placement

    if not isinstance(placed.placement, Placement):
        from placer.plans.runnable import runnable

        made = runnable(placed.graph, placed.placement)
        lowered = replace(placed, graph=made.graph, placement=made.placement)
        return made.outputs(_run_step(lowered, made.feeds(feeds), engine, timeout_s))
    if engine == "onnxruntime":
        # the engine placer.engines.onnxruntime.load runs split models with: the partitions' sessions at once
        from placer.engines.onnxruntime.placed import OrtPlacement

        with OrtPlacement(placed.graph, placed.placement, placed.devices, pipeline=placed.pipeline) as ort:
            return ort.run_arrays(feeds, timeout_s=timeout_s)
    from placer.engines.torch.executor import PlacedExecutor

    with PlacedExecutor(placed.graph, placed.placement, placed.devices, training=placed.training,
                        pipeline=placed.pipeline) as executor:
        return {k: v.detach().cpu().numpy() for k, v in executor.run(feeds, timeout_s=timeout_s).items()}
