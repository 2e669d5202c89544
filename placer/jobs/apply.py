"""The apply job: a placement written into an ONNX model, and optionally the model split per device.

`apply(ApplySettings(ModelSettings("model.onnx"), PlacementSettings("p.json"), output="placed.onnx"))`
is what `placer apply` runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placer.errors import PlacerError
from placer.jobs.paths import check_writable
from placer.jobs.settings import ModelSettings, PlacementSettings


@dataclass(frozen=True)
class ApplySettings:
    """The model and its placement (for a `cluster`, a catalogue name or a TOML file: its devices
    listed, a node on another refused); the annotated model goes to `output`, one model per device
    stage into the folder `split`. Refused in one line on construction when neither is given."""

    model: ModelSettings
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    cluster: str | None = None
    output: str | Path | None = None
    split: str | Path | None = None

    def __post_init__(self) -> None:
        if not self.output and not self.split:
            raise PlacerError("say where to write: -o PLACED.onnx for the annotated model, --split DIR for "
                              "per-device models, or both")


@dataclass(frozen=True)
class ApplyResult:
    """The placement written (or the plan, `plan`), of `graph`, for `cluster` (None: no cluster); the split's index
    file and its stages' devices (None: not asked for); the value of ONNX Runtime's session option
    `placer.annotate.write.ORT_SETTING` that places the annotated model's layers."""

    placement: Any
    graph: Any
    cluster: Any
    split_index: Path | None
    split_devices: list[str]
    ort_layer_settings: str
    written: dict[str, str] | None = None   # node -> device of every node in the file, Constant weights too
    plan: Any = None   # the `Plan` written when it splits ops (then `placement` is None), else None

    def plan_line(self, output) -> str:
        """What a plan's apply wrote to `output`, in one line: its ops split and whole, its devices."""
        ops = self.plan.ops
        split = sum(1 for op in ops.values() if not op.whole)
        return (f"wrote {output}: a plan of {len(ops)} ops over {', '.join(self.plan.devices)}, {split} split across "
                f"devices (IR-11 sharding specs), {len(ops) - split} whole"
                + (f" for cluster {self.cluster.name}" if self.cluster else ""))

    def device_counts(self) -> dict[str, int]:
        """How many of the file's nodes each device holds: they add up to the nodes placed."""
        counts = {d: 0 for d in self.placement.devices}
        for device in (self.written or self.placement.nodes).values():
            counts[device] += 1
        return counts


def apply(settings: ApplySettings) -> ApplyResult:
    """Check the output paths, resolve the placement against the graph, write the annotated model
    and/or the split."""
    import json

    from graphs import resolve
    from placer.annotate.split import write_split
    from placer.annotate.write import apply_placement, ort_layer_settings, save_model
    from placer.graph.load import parse_input_shapes, read_model
    from placer.hardware import load_cluster
    from placer.kernels.loading import load_graph

    if settings.output:
        check_writable(settings.output, "-o")
    if settings.split:
        check_writable(settings.split, "--split", folder=True)
    cluster = load_cluster(settings.cluster) if settings.cluster else None
    path = resolve(settings.model.graph)
    # the annotations need the graph alone: large external weights stay in their files and are copied
    # beside the output file to file (save_model); a split writes each device's weights into its model
    weights = "load" if settings.split else "shapes"
    original = read_model(path, weights)
    # --inputs: the shapes they decide
    graph = load_graph(path, parse_input_shapes(list(settings.model.input_shapes)), settings.model.inputs,
                       weights=weights)
    plan = settings.placement.plan_to_write(graph, cluster, model=original)
    if plan is not None:
        return _apply_plan(settings, path, original, graph, cluster, plan)
    placement = settings.placement.to_write(
        graph, cluster, f"{path} holds no placement; give --placement P.json (from placer train) or --device D",
        model=original)
    placed = apply_placement(original, placement, graph)
    if settings.output:
        save_model(placed, settings.output, weights_from=path)
    index, devices = None, []
    if settings.split:
        index = write_split(placed, placement, graph, settings.split)
        devices = [stage["device"] for stage in json.loads(index.read_text())["stages"]]
    # a Constant weight, folded into its reader in `graph`, is a node of the file on its reader's device
    written = {**placement.nodes, **graph.constant_devices(placement.nodes)}
    return ApplyResult(placement, graph, cluster, index, devices, ort_layer_settings(placement), written)


def _apply_plan(settings: ApplySettings, path, original, graph, cluster, plan) -> ApplyResult:
    """A plan that splits ops, written as IR-11 sharding specs (`placer.plans.export`)."""
    from placer.annotate.write import ort_layer_settings, save_model
    from placer.placement import Placement
    from placer.plans.export import apply_plan

    if settings.split:
        raise PlacerError("--split cuts a model into one model per device, and the plan splits ops across devices, "
                          "which no one device's model holds; write it with -o alone")
    save_model(apply_plan(original, plan, graph), settings.output, weights_from=path)
    whole = Placement(list(plan.devices), {n: op.devices[0] for n, op in plan.ops.items() if op.whole})
    return ApplyResult(None, graph, cluster, None, [], ort_layer_settings(whole), plan=plan)
