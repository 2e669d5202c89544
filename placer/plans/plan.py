"""`Plan`: plain data saying, for each ONNX node, the devices it runs on and the layouts of its
inputs and outputs there (`placer.plans.layout`). An op on one device is whole, as in a
`Placement`, which is the plan whose every op is whole: it converts to a plan and back losslessly.

The JSON form, versioned like a placement's (``placer.plan/1``); a whole op needs only its device::

    {"format": "placer.plan/1",
     "graph": {"sha256": "<the graph's hash, as `placer inspect --json` reports it>"},
     "devices": ["cuda:0", "cuda:1"],
     "ops": {"mm": {"devices": ["cuda:0", "cuda:1"], "inputs": ["Shard(0)", "Replicate()"],
                    "outputs": ["Shard(0)"]},
             "softmax": {"devices": ["cuda:0"]}},
     "measurement": {"...": "optional"}}

A placement file (``placer.placement/1``) reads as the plan of its placement.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placer.errors import PlacerError
from placer.placement import FORMAT as PLACEMENT_FORMAT, Placement, read_json
from placer.plans.layout import REPLICATE, Layout, parse_layout

NAME = "placer.plan"
VERSION = 1
FORMAT = f"{NAME}/{VERSION}"


@dataclass(frozen=True)
class OpPlan:
    """An op's devices (in ring order) and its layouts there; no layouts: every one Replicate()."""

    devices: tuple[str, ...]
    inputs: tuple[Layout, ...] = ()
    outputs: tuple[Layout, ...] = ()

    @property
    def whole(self) -> bool:
        return len(self.devices) == 1

    @property
    def placed(self) -> bool:
        """Whole on one device with every tensor whole: what a placement says of an op."""
        return self.whole and all(x == REPLICATE for x in self.inputs + self.outputs)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"devices": list(self.devices)}
        if self.inputs or self.outputs:
            data["inputs"] = [str(x) for x in self.inputs]
            data["outputs"] = [str(x) for x in self.outputs]
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str) -> OpPlan:
        if isinstance(data, str):   # a whole op may be written as its device, as a placement does
            data = {"devices": [data]}
        if not isinstance(data, dict) or set(data) - {"devices", "inputs", "outputs"}:
            raise PlacerError(f"{where} must be {{\"devices\": [...], \"inputs\": [...], \"outputs\": [...]}}")
        devices = data.get("devices")
        if not isinstance(devices, list) or not devices or not all(isinstance(d, str) for d in devices):
            raise PlacerError(f"{where}: \"devices\" must be a non-empty list of device strings")
        layouts = []
        for key in ("inputs", "outputs"):
            value = data.get(key, [])
            if not isinstance(value, list):
                raise PlacerError(f"{where}: \"{key}\" must be a list of layouts like \"Shard(0)\"")
            layouts.append(tuple(parse_layout(x, f"{where} {key}") for x in value))
        return cls(tuple(devices), *layouts)


@dataclass
class Plan:
    """Node name -> `OpPlan`, over an ordered device list, for the graph with hash `graph_sha256`."""

    devices: list[str]
    ops: dict[str, OpPlan]
    graph_sha256: str | None = None
    measurement: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, op in self.ops.items():
            if not op.devices:
                raise PlacerError(f"the plan gives op {name} no device; give it one or more")
            unknown = [d for d in op.devices if d not in self.devices]
            if unknown:
                raise PlacerError(f"the plan puts op {name} on {unknown}, which are not in its device list "
                                  f"{self.devices}; add them to \"devices\" or fix the op")
            if len(set(op.devices)) != len(op.devices):
                raise PlacerError(f"the plan lists a device of op {name} twice ({list(op.devices)}); give each once")

    @classmethod
    def from_placement(cls, placement: Placement) -> Plan:
        """The plan of a placement: every op whole on its device."""
        return cls(list(placement.devices), {n: OpPlan((d,)) for n, d in placement.nodes.items()},
                   placement.graph_sha256, placement.measurement, dict(placement.extra))

    @property
    def is_placement(self) -> bool:
        return all(op.placed for op in self.ops.values())

    def device_counts(self) -> dict[str, int]:
        """How many ops run on each device (a split op on each of its devices), devices with none as 0."""
        counts = {d: 0 for d in self.devices}
        for op in self.ops.values():
            for d in op.devices:
                counts[d] += 1
        return counts

    def to_placement(self) -> Placement:
        """The placement this plan is; a plan that splits an op is none (PlacerError naming it)."""
        split = next((n for n, op in self.ops.items() if not op.whole), None)
        if split is not None:
            raise PlacerError(f"the plan splits op {split} over {list(self.ops[split].devices)}, so it is no "
                              "placement; price it as a plan (placer.plans.pricing)")
        return Placement(list(self.devices), {n: op.devices[0] for n, op in self.ops.items()}, self.graph_sha256,
                         self.measurement, dict(self.extra))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"format": FORMAT, "graph": {"sha256": self.graph_sha256},
                                "devices": list(self.devices),
                                "ops": {n: op.to_dict() for n, op in self.ops.items()}}
        if self.measurement is not None:
            data["measurement"] = self.measurement
        data.update(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: Any, source: str = "plan") -> Plan:
        """A plan file's contents (or a placement file's, as its plan); a newer format is refused."""
        fmt = data.get("format") if isinstance(data, dict) else None
        if fmt == PLACEMENT_FORMAT:
            return cls.from_placement(Placement.from_dict(data, source))
        version = re.fullmatch(rf"{re.escape(NAME)}/(\d+)", fmt) if isinstance(fmt, str) else None
        if version is None:
            raise PlacerError(f"{source} is not a plan file: expected \"format\": \"{FORMAT}\" "
                              f"(or a placement's, \"{PLACEMENT_FORMAT}\")")
        if int(version.group(1)) != VERSION:
            raise PlacerError(f"{source} is a {fmt} file, which this placer does not read (it reads {FORMAT}); "
                              "use the placer that wrote it, or upgrade placer")
        devices, ops = data.get("devices"), data.get("ops")
        if not isinstance(devices, list) or not devices or not all(isinstance(d, str) for d in devices):
            raise PlacerError(f"{source}: \"devices\" must be a non-empty list of device strings")
        if not isinstance(ops, dict):
            raise PlacerError(f"{source}: \"ops\" must map node names to {{\"devices\": [...]}}")
        graph = data.get("graph") or {}
        known = {"format", "graph", "devices", "ops", "measurement"}
        return cls(devices, {n: OpPlan.from_dict(op, f"{source}: op {n}") for n, op in ops.items()},
                   graph.get("sha256"), data.get("measurement"), {k: v for k, v in data.items() if k not in known})

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        return cls.from_dict(read_json(path, "plan", "a plan.json (or a placement.json)"), source=str(path))
