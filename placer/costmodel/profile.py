"""`Profile`: the time of each step on each device and of transfers between devices, as measured.

This is the data a cost model and a simulator need (`placer.costmodel.protocol.CostModel`); the
profiler that measures it is `placer.costmodel.profiler`. Identical devices (the same spec but for
the index, e.g. `cpu:0[threads=1]` and `cpu:1[threads=1]`) form a class (`device_class`) that is
profiled once, and every member gets its class's figures.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from placer.devices import Device
from placer.engines.affinity import cpu_threads
from placer.errors import PlacerError
from placer.measure.measurer import MeasureProtocol

FORMAT = "placer.profile/1"
TRANSFER_SIZES = (4 * 2**10, 2**20, 16 * 2**20)
TRANSFER_PAIRS = 3   # device pairs timed per (source class, destination class)
PROFILE_PROTOCOL = MeasureProtocol(warmup=1, repeats=3)


@dataclass(frozen=True)
class Settle:
    """When a class's profile is stable: after at least the protocol's `repeats` rounds, the last
    `window` rounds moved the whole step's median and the sum of per-node medians by at most
    `tolerance` (a fraction) each; else stop at `max_rounds` or `max_seconds`, unsettled."""

    tolerance: float = 0.02
    window: int = 2
    max_rounds: int = 15
    max_seconds: float = 60.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PROFILE_SETTLE = Settle()


@dataclass
class TransferStat:
    """Moving a tensor from `src` to `dst`: ``latency_s + nbytes / bandwidth_Bps``."""

    src: str
    dst: str
    latency_s: float
    bandwidth_Bps: float | None   # None: no copy happens (virtual CPU devices share memory)

    def time(self, nbytes: int) -> float:
        """Predicted seconds to move `nbytes`."""
        return self.latency_s + (nbytes / self.bandwidth_Bps if self.bandwidth_Bps else 0.0)


@dataclass
class Profile:
    """Measured op times (step -> device -> seconds; inf where the step failed there), transfers,
    and how they were measured. Folded nodes (computed once per placement) cost 0. A step is a
    node, and for the training objective also a node's backward, a loss term, an accumulation
    or a parameter's update (`placer.engines.torch.backward` names them)."""

    devices: list[str]
    op_times: dict[str, dict[str, float]]
    transfers: list[TransferStat] = field(default_factory=list)
    folded_nodes: list[str] = field(default_factory=list)
    step_times: dict[str, float] = field(default_factory=dict)   # device -> whole graph alone (median)
    failures: dict[str, str] = field(default_factory=dict)       # device -> why it could not run the graph
    graph_sha256: str | None = None
    protocol: dict[str, Any] = field(default_factory=dict)
    # whole-graph measurements it was checked and calibrated against (`placer.costmodel.calibration`)
    calibration: dict[str, Any] = field(default_factory=dict)
    flag: str | None = None   # why its predictions are not to be trusted (off the measured steps), if so
    # control-flow node -> what the profiling inputs made it do ("then branch", "3 iterations" -> runs)
    control_flow: dict[str, dict[str, int]] = field(default_factory=dict)

    def op_time(self, node: str, device: str) -> float:
        """Seconds of step `node` on `device` (inf when unknown or failed)."""
        return self.op_times.get(node, {}).get(device, math.inf)

    @property
    def objective(self) -> str:
        """What a step was: "inference" (the forward pass) or "training" (forward, backward, update)."""
        return str(self.protocol.get("objective", "inference"))

    def transfer_time(self, nbytes: int, src: str, dst: str) -> float:
        """Seconds to move `nbytes` from `src` to `dst` (0 on the same device)."""
        if src == dst:
            return 0.0
        for t in self.transfers:
            if t.src == src and t.dst == dst:
                return t.time(nbytes)
        return math.inf

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (inf written as null)."""
        return {"format": FORMAT, "graph": {"sha256": self.graph_sha256}, "devices": list(self.devices),
                "op_times": {n: {d: (None if math.isinf(t) else t) for d, t in per.items()}
                             for n, per in self.op_times.items()},
                "transfers": [asdict(t) for t in self.transfers], "folded_nodes": list(self.folded_nodes),
                "step_times": dict(self.step_times), "failures": dict(self.failures),
                "protocol": dict(self.protocol), "calibration": dict(self.calibration), "flag": self.flag,
                "control_flow": dict(self.control_flow)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Profile:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PlacerError(f"not a profile: expected \"format\": \"{FORMAT}\"; write one with placer measure --profile")
        return cls(devices=list(data["devices"]),
                   op_times={n: {d: (math.inf if t is None else float(t)) for d, t in per.items()}
                             for n, per in data["op_times"].items()},
                   transfers=[TransferStat(**t) for t in data.get("transfers", [])],
                   folded_nodes=list(data.get("folded_nodes", [])),
                   step_times=dict(data.get("step_times", {})), failures=dict(data.get("failures", {})),
                   graph_sha256=(data.get("graph") or {}).get("sha256"), protocol=dict(data.get("protocol", {})),
                   calibration=dict(data.get("calibration") or {}), flag=data.get("flag"),
                   control_flow=dict(data.get("control_flow") or {}))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        path = Path(path)
        if not path.is_file():
            raise PlacerError(f"profile file {path} does not exist; write one with placer measure --profile")
        return cls.from_dict(json.loads(path.read_text()))


def device_class(dev: Device, devices: list[Device]) -> str:
    """What makes devices identical for profiling: the spec without the index, with the threads a
    CPU device really runs with (its share of the cores by default) and the model of a GPU."""
    if dev.kind == "cpu":
        return str(replace(dev, index=None, threads=cpu_threads(dev, devices)))
    return f"{replace(dev, index=None)} {torch.cuda.get_device_name(dev.index)}"


def device_classes(devices: list[Device]) -> dict[str, str]:
    """Device name -> its class (`device_class`)."""
    return {d.name: device_class(d, devices) for d in devices}


def _members(devs: list[Device], classes: dict[str, str]) -> dict[str, list[Device]]:
    """Class -> its devices, in the order given."""
    members: dict[str, list[Device]] = {}
    for d in devs:
        members.setdefault(classes[d.name], []).append(d)
    return members


def spread_transfers(names: list[str], classes: dict[str, str],
                     fits: dict[tuple[str, str], TransferStat]) -> list[TransferStat]:
    """A copy of its class pair's fit for every ordered pair of `names` (KeyError if one is missing)."""
    return [replace(fits[classes[a], classes[b]], src=a, dst=b) for a in names for b in names if a != b]
