"""The settings every job shares: which model, which placement, on which hardware, and what one
step is.

Frozen dataclasses of plain values (what a user typed), each with the methods that turn it into
the objects the packages below work on. Nothing here reads an `argparse.Namespace`: the CLI builds
these from its arguments (`placer.commands.common`), a script builds them directly.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from placer.errors import PlacerError

# Seeds every random generator placer seeds takes (numpy's legacy one and CP-SAT's stop at 2**31 - 1)
MAX_SEED = 2**31 - 1


def check_seed(seed: int | None) -> None:
    """A seed no generator takes (negative, too large) is a `PlacerError` in one line."""
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise PlacerError(f"--seed must be from 0 to {MAX_SEED}, not {seed}")


@dataclass(frozen=True)
class ModelSettings:
    """The model: an ONNX file or a zoo name, its dynamic dimensions bound (`input_shapes`, as
    "name=1x3x224x224"), and sample inputs that feed every run (`inputs`, an .npz)."""

    graph: str
    input_shapes: tuple[str, ...] = ()
    inputs: str | None = None

    def load(self, micro_batches: int = 1, weights: str = "load"):
        """The `OpGraph` (a zoo name is exported on first use), and per micro-batch k the
        `inputs` arrays `name#k` (`placer run --micro-batches M` only), checked against it.
        `weights` "shapes": large external weights stay unread, for jobs that run nothing
        (`placer.graph.load.load_graph`); weights it cannot read are a note on stderr."""
        from placer.graph.feeds import check_micro_batch_inputs, read_inputs, split_micro_batches
        from placer.kernels.loading import load_graph

        if not self.inputs:
            graph = load_graph(self.graph, list(self.input_shapes), weights=weights)
            each = [{} for _ in range(micro_batches)]
        else:
            label = f"--inputs {self.inputs}"
            every, each = split_micro_batches(read_inputs(self.inputs), micro_batches, label)
            graph = load_graph(self.graph, list(self.input_shapes), every, inputs_label=label, weights=weights)
            for k, arrays in enumerate(each):
                check_micro_batch_inputs(graph, arrays, k, label)
        if graph.weights_note:   # one line, not a warning: the job goes on without the weights
            print(f"note: {graph.weights_note}", file=sys.stderr)
        return graph, each

    def graph_only(self, weights: str = "load"):
        """The `OpGraph` alone."""
        return self.load(weights=weights)[0]


@dataclass(frozen=True)
class HardwareSettings:
    """Where to place: local `devices` ("cpu:0,cpu:1"; None: the machine's default set), or a
    described `cluster` (a catalogue name or a TOML file), placed for in the simulator."""

    devices: str | None = None
    cluster: str | None = None

    @cached_property
    def described(self) -> Any:
        """The cluster `cluster` names, loaded once, or None."""
        if not self.cluster:
            return None
        from placer.hardware import load_cluster

        return load_cluster(self.cluster)

    def device_list(self) -> list:
        """The `Device`s: the cluster's (their memory as caps), --devices, or the default set."""
        from placer.devices import as_devices, default_devices, parse_devices

        if self.described is not None:   # described, not present: no check that this machine has them
            return as_devices(self.described.device_specs())
        if self.devices:
            return parse_devices(self.devices)
        return default_devices()

    def devices_for(self, placement) -> list:
        """The devices to run `placement` on: the cluster's or --devices when given, else the
        placement's own device list (each CPU device with its share of the cores)."""
        from placer.devices import parse_devices

        if self.cluster or self.devices:
            return self.device_list()
        return parse_devices(list(placement.devices))

    @property
    def simulated_only(self) -> bool:
        """Whether the cluster is hardware this machine is not: every figure is then simulated, and
        whatever would run for real is refused (`refuse_real`)."""
        return self.described is not None and not self.described.is_this_machine()

    @property
    def weights(self) -> str:
        """How much of the model to read (`ModelSettings.load`): shapes alone when every figure is
        simulated, the weights too when something may run."""
        return "shapes" if self.simulated_only else "load"

    def refuse_real(self, what: str) -> None:
        """A `PlacerError` in one line when `what` (something that runs placements for real) is
        asked for on a described cluster this machine is not."""
        if self.simulated_only:
            raise PlacerError(f"{what} runs placements for real, and cluster {self.cluster!r} is hardware this "
                              f"machine does not have; place for it in the simulator instead (placer compare "
                              f"--cluster {self.cluster}, or placer train --cluster {self.cluster} --reward "
                              "simulated), or describe this machine with placer cluster describe-local")


@dataclass(frozen=True)
class PlacementSettings:
    """Which placement: a `file` (format placer.placement/1, or a plan, placer.plan/1), else every
    node on one `device`, else the one `placer apply` stored in the model; `device_map` renames its
    devices ("cuda:1=cuda:0"). A plan that splits ops is written and shown (`plan_to_write`) and run
    (`to_run`: its forward step, in the torch engine)."""

    file: str | None = None
    device: str | None = None
    device_map: tuple[str, ...] = ()

    @property
    def origin(self) -> str:
        """Where the placement comes from, in words."""
        return self.file or ("--device" if self.device else "stored in the model")

    def chosen(self, graph, model=None):
        """The placement named for `graph`, unchecked: the file, every node on the device, or the
        one stored in `model` (default: the graph's own); None when the model holds none."""
        from placer.annotate.read import read_placement
        from placer.placement import Placement
        from placer.plans.read_back import holds_plan, read_plan

        if self.file:
            plan = self.plan_file()   # a plan file that splits no op is its placement
            return Placement.load(self.file) if plan is None else _placement_of(plan, self.file)
        if self.device:
            return Placement.single_device(list(graph.nodes), self.device, graph.sha256)
        model = graph.model if model is None else model
        if holds_plan(model):   # a plan's split ops have no one device: refused in one line, naming one
            return _placement_of(read_plan(model), "the model")
        return read_placement(model)

    def plan_file(self):
        """The `Plan` in `file` when it is a plan file (placer.plan/1); None for anything else, which
        reads (or is refused) as a placement file, as it always has."""
        import json
        from pathlib import Path

        from placer.plans.plan import NAME, Plan

        try:
            data = json.loads(Path(self.file).read_text())
        except (OSError, ValueError):
            return None
        fmt = data.get("format") if isinstance(data, dict) else None
        return Plan.from_dict(data, self.file) if isinstance(fmt, str) and fmt.startswith(f"{NAME}/") else None

    def plan_to_write(self, graph, cluster, model=None):
        """The plan to write or show when the one named splits an op (a plan file, or a plan `placer
        apply` stored in `model`, default the graph's own), checked against `graph`, on `cluster`'s
        devices when given; None when the named placement splits nothing (`to_write` reads it)."""
        from placer.plans.export import checked_plan
        from placer.plans.read_back import holds_plan, read_plan

        if self.device:
            return None
        model = graph.model if model is None else model
        plan = self.plan_file() if self.file else (read_plan(model) if holds_plan(model) else None)
        if plan is None or plan.is_placement:
            return None
        if self.device_map:
            raise PlacerError("--map renames the devices of a placement, not yet of a plan that splits ops; rename "
                              "them in the plan file")
        plan = checked_plan(graph, plan)
        if cluster is None:
            return plan
        outside = sorted(set(plan.devices) - set(cluster.device_names))
        if outside:
            raise PlacerError(f"the plan uses {', '.join(outside)}, which cluster {cluster.name!r} does not have (its "
                              f"devices: {', '.join(cluster.device_names)}); give a plan made for it")
        plan.devices = list(cluster.device_names)
        return plan

    def to_run(self, graph):
        """The placement to run on this machine: the one named, else everything on the plain CPU;
        checked against `graph` and the devices here. A plan that splits ops is run as that plan
        (checked against `graph`; its devices are checked by the job that runs it)."""
        from placer.annotate.resolve import parse_device_map, resolve_placement
        from placer.placement import Placement

        plan = None if self.device else self.plan_to_write(graph, None)
        if plan is not None:
            return plan
        placement = self.chosen(graph) or Placement.single_device(list(graph.nodes), "cpu", graph.sha256)
        return resolve_placement(graph, placement, parse_device_map(self.device_map))

    def to_write(self, graph, cluster, missing: str, model=None):
        """The placement to write or show, checked against `graph` but not against this machine (a
        placement for a GPU box can be written anywhere), on `cluster`'s devices when given; the
        `PlacerError` `missing` when none is named and the model holds none."""
        import dataclasses

        from placer.annotate.resolve import parse_device_map, resolve_placement

        placement = self.chosen(graph, model)
        if placement is None:
            raise PlacerError(missing)
        placement = resolve_placement(graph, placement, parse_device_map(self.device_map), check_devices=False)
        if cluster is None:
            return placement
        outside = sorted(set(placement.nodes.values()) - set(cluster.device_names))
        if outside:
            raise PlacerError(f"the placement puts nodes on {', '.join(outside)}, which cluster {cluster.name!r} does "
                              f"not have (its devices: {', '.join(cluster.device_names)}); give a placement made for "
                              f"it (placer train --cluster), or rename a device with --map {outside[0]}=<one of those>")
        return dataclasses.replace(placement, devices=cluster.device_names)


def _placement_of(plan, source: str):
    """The placement a plan is; one that splits an op is refused in one line that says what takes it."""
    split = next((n for n, op in plan.ops.items() if not op.whole), None)
    if split is not None:
        raise PlacerError(f"{source} holds a plan that splits op {split} across {', '.join(plan.ops[split].devices)}, "
                          "and this command runs placements only; write the plan with placer apply, look at it with "
                          "placer show")
    return plan.to_placement()


@dataclass(frozen=True)
class StepSettings:
    """What one step is: the forward pass, or a training step (`objective` "training") with its
    `loss`, `targets` (.npz) and `optimizer`; pipelined over `micro_batches` in `schedule`."""

    objective: str = "inference"
    loss: str = "mse"
    targets: str | None = None
    optimizer: str = "sgd"
    micro_batches: int = 1
    schedule: str = "1f1b"
    engine: str = field(default="torch")

    def check_engine(self) -> None:
        """Refuse, before any work, what the engine cannot do (a training step in ONNX Runtime)."""
        from placer.engines import check_engine

        check_engine(self.engine, self.objective)

    def training_spec(self, graph):
        """The `TrainingSpec` of a training step (targets read and checked), else None."""
        if self.objective != "training":
            return None
        import numpy as np
        import torch

        from placer.engines.torch.training import check_targets
        from placer.program.training import Loss, OptimizerSpec, TrainingSpec

        targets = {}
        if self.targets:
            try:
                with np.load(self.targets, allow_pickle=False) as data:
                    targets = {k: torch.from_numpy(np.array(data[k])) for k in data.files}
            except (OSError, ValueError) as exc:
                raise PlacerError(f"cannot read --targets {self.targets} ({exc}); give an .npz written by "
                                  "numpy.savez") from None
        loss = Loss(self.loss)
        return TrainingSpec(loss=loss, optimizer=OptimizerSpec(self.optimizer),
                            targets=check_targets(loss, graph, targets))

    def pipeline(self):
        """The `Pipeline` of `micro_batches` and `schedule` (1: no pipelining)."""
        from placer.program.pipeline import Pipeline

        return Pipeline(self.micro_batches, self.schedule)
