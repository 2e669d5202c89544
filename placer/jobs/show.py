"""The show job: what a placement puts on each device, the peak memory a step needs there, and
optionally a picture of it and its step predicted on described hardware.

`show(ShowSettings(ModelSettings("placed.onnx")))` is what `placer show` runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placer.jobs.paths import check_writable
from placer.jobs.settings import ModelSettings, PlacementSettings, StepSettings


@dataclass(frozen=True)
class ShowSettings:
    """The model and its placement (default: the one stored in the model); the step whose memory
    is accounted (`step.objective` "training": with gradients, saved activations and optimizer
    state); a `cluster` (a catalogue name or a TOML file) to predict the step on; where to draw the
    picture (`picture`, an image file; None: no picture)."""

    model: ModelSettings
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    cluster: str | None = None
    step: StepSettings = field(default_factory=StepSettings)
    picture: str | Path | None = None


@dataclass(frozen=True)
class ShowResult:
    """What was asked (`settings`); per device its `DeviceSummary` (`rows`) and the peak memory of
    a step (`memory`), the bytes crossing devices per step, the training step accounted (None:
    inference); on a cluster, the step predicted there (a `Measurement` of simulated figures); the
    picture drawn."""

    settings: ShowSettings
    graph: Any
    placement: Any
    rows: list
    memory: dict[str, int]
    crossing: int
    training: Any
    cluster: Any
    predicted: Any
    picture: Path | None
    plan: Any = None      # the `Plan` shown when it splits ops (then the rows are its lowered graph's)
    summary: Any = None   # its `PlanSummary`: the split ops and the layout changes


    def to_dict(self) -> dict:
        """The summary as `placer show --json` prints it."""
        m, cluster = self.predicted, self.cluster
        predicted = {} if m is None else {
            "simulated": True, "cluster": cluster.name,
            "predicted": {"step_time_s": m.step_time if m.ok else None, "failure": m.failure, "reason": m.reason,
                          "peak_memory": m.peak_memory,
                          "memory_capacity": {d.name: d.model.memory_bytes for d in cluster.devices}}}
        return {"graph": self.settings.model.graph, "sha256": self.graph.sha256,
                "placement": self.settings.placement.origin,
                "devices": [{**row.to_dict(), "peak_memory": self.memory.get(row.device, 0)} for row in self.rows],
                "objective": self.settings.step.objective, "bytes_crossing": self.crossing,
                "picture": str(self.picture) if self.picture else None, **predicted,
                **({} if self.summary is None else {"plan": self.summary.to_dict()})}


def show(settings: ShowSettings) -> ShowResult:
    """Summarise the placement per device; predict it on the cluster and draw it when asked."""
    from placer.annotate.summary import cross_device_bytes, summarize
    from placer.engines.torch.executor import accounted_memory
    from placer.hardware import load_cluster
    from placer.kernels.prepare import prepare

    if settings.picture:
        check_writable(settings.picture, "-o")
    cluster = load_cluster(settings.cluster) if settings.cluster else None
    graph = settings.model.graph_only(weights="shapes")   # predicted, never run
    plan = settings.placement.plan_to_write(graph, cluster)
    if plan is not None:
        return _show_plan(settings, graph, plan, cluster)
    placement = settings.placement.to_write(graph, cluster, f"{settings.model.graph} holds no placement; write one "
                                                            "with placer apply, or give --placement P.json")
    training = settings.step.training_spec(graph)
    # accounted from the weights' shapes: their values are not read
    prepared = prepare(graph, weights="shapes")
    memory = {d: m.peak for d, m in accounted_memory(graph, placement, prepared=prepared, training=training).items()}
    predicted = None
    if cluster is not None:
        from placer.costmodel.roofline import cluster_measurer

        # simulated with the roofline cost model, memory capacities as caps: its figures are predictions
        predicted = cluster_measurer(cluster, graph, training=training).measure(placement)
    picture = None
    if settings.picture:
        from placer.annotate.draw import draw_placement

        picture = draw_placement(graph, placement, settings.picture)
    return ShowResult(settings, graph, placement, summarize(graph, placement), memory,
                      cross_device_bytes(graph, placement), training, cluster, predicted, picture)


def _show_plan(settings: ShowSettings, graph, plan, cluster) -> ShowResult:
    """A plan that splits ops: per device, the figures of its lowered graph (shards and collective
    steps, so the bytes sent count the collectives'); its split ops and layout changes; predicted
    on the cluster through the simulator; drawn with split ops coloured by device set."""
    from placer.annotate.summary import cross_device_bytes, summarize
    from placer.errors import PlacerError
    from placer.plans.summary import summarize_plan

    if settings.step.objective == "training":
        raise PlacerError("a plan that splits ops is shown for the forward pass only so far; drop --objective training")
    summary = summarize_plan(graph, plan)
    lowered = summary.lowered
    predicted = None
    if cluster is not None:
        from placer.plans.pricing import simulate_plan

        predicted = simulate_plan(graph, plan, cluster)
    picture = None
    if settings.picture:
        from placer.annotate.draw import draw_groups

        group_of = {n: "+".join(op.devices) for n, op in plan.ops.items()}
        groups = list(dict.fromkeys(group_of[n] for n in graph.nodes))
        picture = draw_groups(graph, group_of, groups, settings.picture, marked=summary.moves,
                              marked_label="moves between devices or layouts",
                              title=f"{graph.source or 'graph'}: a plan over {len(plan.devices)} devices")
    # no memory without a cluster: the executor's accounting needs kernels, which collective steps have not
    return ShowResult(settings, graph, lowered.placement, summarize(lowered.graph, lowered.placement), {},
                      cross_device_bytes(lowered.graph, lowered.placement), None, cluster, predicted, picture,
                      plan, summary)
