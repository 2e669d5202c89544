"""`Placement`: plain data mapping each ONNX node name to a device string.

It is what the policy and the baselines emit, what `apply` writes and what the executor runs.
The JSON form (``placer.placement/1``) is stable; a hand-written file works like a generated one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placer.errors import PlacerError

FORMAT = "placer.placement/1"


@dataclass
class Placement:
    """Node name -> device, over an ordered device list, for the graph with hash `graph_sha256`."""

    devices: list[str]
    nodes: dict[str, str]
    graph_sha256: str | None = None
    measurement: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted({d for d in self.nodes.values() if d not in self.devices})
        if unknown:
            raise PlacerError(
                f"placement puts nodes on {unknown}, which are not in its device list "
                f"{self.devices}; add them to \"devices\" or fix the node entries"
            )

    @classmethod
    def single_device(cls, node_names: list[str], device: str, graph_sha256: str | None = None,
                      devices: list[str] | None = None) -> Placement:
        """Every node on `device` (the device list defaults to just that device)."""
        return cls(devices=list(devices or [device]), nodes={n: device for n in node_names},
                   graph_sha256=graph_sha256)

    def key(self) -> tuple[str, ...]:
        """A hashable identity of the assignment (node order sorted), for caches."""
        return tuple(f"{n}\0{d}" for n, d in sorted(self.nodes.items()))

    def device_counts(self) -> dict[str, int]:
        """How many nodes each device holds (devices with none included, as 0)."""
        counts = {d: 0 for d in self.devices}
        for d in self.nodes.values():
            counts[d] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"format": FORMAT, "graph": {"sha256": self.graph_sha256},
                                "devices": list(self.devices), "nodes": dict(self.nodes)}
        if self.measurement is not None:
            data["measurement"] = self.measurement
        data.update(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "placement") -> Placement:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PlacerError(f"{source} is not a placement file: expected \"format\": \"{FORMAT}\"")
        devices, nodes = data.get("devices"), data.get("nodes")
        if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices) or not devices:
            raise PlacerError(f"{source}: \"devices\" must be a non-empty list of device strings")
        if not isinstance(nodes, dict) or not all(isinstance(v, str) for v in nodes.values()):
            raise PlacerError(f"{source}: \"nodes\" must map node names to device strings")
        graph = data.get("graph") or {}
        known = {"format", "graph", "devices", "nodes", "measurement"}
        return cls(devices=devices, nodes=nodes, graph_sha256=graph.get("sha256"),
                   measurement=data.get("measurement"),
                   extra={k: v for k, v in data.items() if k not in known})

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Placement:
        return cls.from_dict(read_json(path, "placement", "a placement.json"), source=str(path))


def read_json(path: str | Path, kind: str, example: str) -> Any:
    """The JSON in `path`; a missing file or one that is not JSON is a one-line `PlacerError`
    that names the `kind` of file wanted and an `example` of one."""
    path = Path(path)
    if not path.is_file():
        raise PlacerError(f"{kind} file {path} does not exist; give the path of {example}")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PlacerError(f"{path} is not valid JSON ({exc}); give {example} written by placer") from None
