"""The measure job: a placement run for real, its step time, spread and peak memory; optionally
every node and transfer timed too (a profile, the data of the profiled cost model).

`measure(MeasureSettings(ModelSettings("model.onnx"), PlacementSettings("p.json")))` is what
`placer measure` runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placer.jobs.placed import placed_model
from placer.jobs.settings import HardwareSettings, ModelSettings, PlacementSettings, StepSettings, check_seed


@dataclass(frozen=True)
class MeasureSettings:
    """The model, its placement, the devices and the step; `warmup` untimed steps, then `repeats`
    timed ones, each limited to `timeout_s`; the random inputs from `seed`; with `profile` (a
    .json path), also every node and transfer timed, written there."""

    model: ModelSettings
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    hardware: HardwareSettings = field(default_factory=HardwareSettings)
    step: StepSettings = field(default_factory=StepSettings)
    warmup: int = 2
    repeats: int = 5
    timeout_s: float = 60.0
    seed: int = 0
    profile: str | Path | None = None

    def __post_init__(self) -> None:
        check_seed(self.seed)


@dataclass(frozen=True)
class MeasureResult:
    """The `Measurement` of the placed model, under the `protocol` it was taken with; the
    micro-batches per second of a pipelined step (None when it failed); where the profile was
    written, as given (None: not asked for)."""

    placed: Any
    measurement: Any
    protocol: Any
    throughput: float | None
    profile: str | Path | None

    def to_dict(self) -> dict:
        """The measurement as `placer measure --json` prints it."""
        graph, pipeline = self.placed.graph, self.placed.pipeline
        return {"graph": {"source": graph.source, "sha256": graph.sha256},
                "placement": self.placed.placement.device_counts(), **self.measurement.to_dict(),
                "micro_batches": pipeline.micro_batches, "throughput_per_s": self.throughput}


def measure(settings: MeasureSettings) -> MeasureResult:
    """Measure the placement; profile the graph on its devices when asked."""
    from placer.kernels.prepare import prepare
    from placer.measure.measurer import MeasureProtocol, measurer_for
    from placer.placement import Placement

    s = settings
    placed = placed_model("placer measure", s.model, s.placement, s.hardware, s.step, {"--profile": s.profile})
    graph, devices, training, pipeline = placed.graph, placed.devices, placed.training, placed.pipeline
    protocol = MeasureProtocol(warmup=s.warmup, repeats=s.repeats, timeout_s=s.timeout_s, objective=s.step.objective)
    # the onnxruntime engine folds what placer's kernels can fold, and runs graphs they cannot bind
    prepared = prepare(graph) if s.step.engine == "torch" else None
    measurer = measurer_for(s.step.engine, graph, devices, protocol=protocol, seed=s.seed,
                            prepared=prepared, training=training, pipeline=pipeline)
    if not isinstance(placed.placement, Placement):   # a plan that splits ops
        from placer.plans.engine import measures_plans

        measures_plans(measurer)
    m = measurer.measure(placed.placement)
    # a pipelined step pushes M micro-batches: what it is worth is micro-batches per second
    throughput = pipeline.micro_batches / m.step_time if m.ok and m.step_time else None
    if s.profile:
        from placer.costmodel.profiler import profile_graph

        profile_protocol = MeasureProtocol(warmup=1, repeats=max(1, s.repeats), timeout_s=s.timeout_s,
                                           objective=s.step.objective)
        profile = profile_graph(graph, devices, seed=s.seed, prepared=prepared,
                                protocol=profile_protocol, training=training, engine=s.step.engine)
        Path(s.profile).parent.mkdir(parents=True, exist_ok=True)   # check_writable found it can be made
        profile.save(s.profile)
    return MeasureResult(placed, m, protocol, throughput, s.profile)
