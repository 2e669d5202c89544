"""The describe-local job: measure this machine and write it as a cluster file that loads back.

`describe_local(DescribeLocalSettings(output="here.toml"))` is what `placer cluster describe-local`
runs: the figures are measured by `placer.costmodel.machine_figures`, written by
`placer.hardware.cluster_toml`, and the file's source names this host and the time, which
`Cluster.is_this_machine` reads back.
"""

from __future__ import annotations

import datetime
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placer.errors import PlacerError
from placer.jobs.settings import HardwareSettings


@dataclass(frozen=True)
class DescribeLocalSettings:
    """The cluster file to write (`output`, a .toml), the `devices` to measure ("cpu:0,cpu:1"; None:
    the machine's default set) and the cluster's `name` (None: local-<hostname>)."""

    output: str | Path
    devices: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class DescribeLocalResult:
    """The file written, the cluster loaded back from it, and the seconds measuring and writing took."""

    path: Path
    cluster: Any
    seconds: float


def describe_local(settings: DescribeLocalSettings) -> DescribeLocalResult:
    """Measure the devices and the links between them, write them as a cluster file and load it back."""
    from placer.costmodel.machine_figures import CONTENTION_SOURCE, measure_machine
    from placer.hardware import load_cluster
    from placer.hardware.cluster import LOCAL_SOURCE
    from placer.hardware.cluster_toml import cluster_toml

    path = Path(settings.output)
    if path.suffix != ".toml":
        raise PlacerError(f"-o {path}: a cluster file ends in .toml; name it like {path.with_suffix('.toml').name}")
    devices = HardwareSettings(devices=settings.devices).device_list()
    host = socket.gethostname() or "localhost"
    when = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    measured = f"{LOCAL_SOURCE} on {host}, {when}"   # Cluster.is_this_machine reads it back
    start = time.perf_counter()
    machine = measure_machine(devices, measured)
    text = cluster_toml(settings.name or f"local-{host}",
                        f"This machine ({host}) as placer sees it: {', '.join(str(d) for d in devices)}", measured,
                        machine.devices, machine.models, machine.links, machine.hosts,
                        header="Written by `placer cluster describe-local`: this machine's devices, measured.",
                        contention_source=CONTENTION_SOURCE)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise PlacerError(f"cannot write {path}: {exc.strerror or exc}; choose another -o PATH") from exc
    cluster = load_cluster(str(path))   # what was written loads back
    return DescribeLocalResult(path, cluster, time.perf_counter() - start)
