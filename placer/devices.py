"""Devices: parsing device strings (`cpu`, `cpu:1[threads=1]`, `cuda:0[mem=4GiB]`) and detection.

Strings are parsed once, where they enter (the commands, the public constructors, with
`parse_devices` or `as_devices`); everything inside passes `Device` objects or their names.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from placer.errors import PlacerError

_SPEC = re.compile(r"^(?P<kind>cpu|cuda)(?::(?P<index>\d+))?(?:\[(?P<opts>[^\]]*)\])?$")
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
SYNTAX = "cpu, cpu:K (a virtual CPU device), cuda:N, with options like cpu:0[threads=1] or cuda:0[mem=4GiB]"


@dataclass(frozen=True)
class Device:
    """A device to place nodes on. `name` is what placements use: the spec without options."""

    kind: str                  # 'cpu' or 'cuda'
    index: int | None          # None for the plain 'cpu' device
    threads: int | None = None  # intra-op threads (CPU devices); None = its share of the cores
    mem_cap: int | None = None  # bytes; a placement whose peak exceeds it fails as out-of-memory

    @property
    def name(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    @property
    def torch_device(self) -> str:
        """What torch calls it: every virtual CPU device is torch's 'cpu'."""
        return "cpu" if self.kind == "cpu" else self.name

    def __str__(self) -> str:
        opts = []
        if self.threads is not None:
            opts.append(f"threads={self.threads}")
        if self.mem_cap is not None:
            opts.append(f"mem={self.mem_cap}")
        return self.name + (f"[{','.join(opts)}]" if opts else "")


def parse_bytes(text: str) -> int:
    """'4GiB' -> 4294967296; plain numbers are bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise PlacerError(f"cannot read the size {text!r}; write it like 512MiB, 4GiB or 1000000")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def parse_device(spec: str) -> Device:
    """Parse one device string; a bad one is a `PlacerError` that shows the syntax."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise PlacerError(f"unknown device {spec!r}; use {SYNTAX}")
    threads = mem = None
    for opt in filter(None, (o.strip() for o in (m.group("opts") or "").split(","))):
        key, _, value = opt.partition("=")
        if key == "threads" and value.isdigit() and int(value) > 0:
            threads = int(value)
        elif key == "mem" and value:
            mem = parse_bytes(value)
        else:
            raise PlacerError(f"unknown device option {opt!r} in {spec!r}; options are threads=N and mem=SIZE")
    index = int(m.group("index")) if m.group("index") is not None else None
    if m.group("kind") == "cuda" and index is None:
        index = 0
    return Device(kind=m.group("kind"), index=index, threads=threads, mem_cap=mem)


def as_devices(devices: Sequence[Device | str]) -> list[Device]:
    """Devices given as objects or strings -> objects (what a public constructor accepts)."""
    return [d if isinstance(d, Device) else parse_device(d) for d in devices]


def device_kind(name: str) -> str:
    """'cuda:1' -> 'cuda', 'cpu:0' -> 'cpu', 'cpu' -> 'cpu' (options ignored)."""
    return name.split(":", 1)[0].split("[", 1)[0]


def parse_devices(specs: str | list[str]) -> list[Device]:
    """A comma-separated string or a list of specs -> devices, checked for duplicates and presence."""
    if isinstance(specs, str):
        specs = [s for s in _split_top_level(specs) if s]
    devices = [parse_device(s) for s in specs]
    names = [d.name for d in devices]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PlacerError(f"device {dupes[0]} is listed twice; give each device once")
    if mixes_cpu_with_virtual_cpus(devices):
        raise PlacerError("do not mix 'cpu' with virtual CPU devices 'cpu:K'; use cpu:0, cpu:1, ...")
    check_available(devices)
    return devices


def mixes_cpu_with_virtual_cpus(devices: Sequence[Device]) -> bool:
    """Whether `devices` holds both the plain 'cpu' and a virtual 'cpu:K' (never usable together)."""
    return any(d.kind == "cpu" and d.index is None for d in devices) and \
        any(d.kind == "cpu" and d.index is not None for d in devices)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside [...] options."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    parts.append(current.strip())
    return parts


def cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def not_on_this_machine(devices: Sequence[Device]) -> list[str]:
    """Names of the CUDA devices among `devices` that this machine does not have."""
    return [d.name for d in devices if d.kind == "cuda" and d.index >= cuda_count()]


def check_available(devices: list[Device]) -> None:
    """Refuse CUDA devices this machine does not have."""
    missing = not_on_this_machine(devices)
    if missing:
        have = ", ".join(f"cuda:{i}" for i in range(cuda_count())) or "none"
        raise PlacerError(f"device {', '.join(missing)} is not on this machine (CUDA devices here: {have}); "
                          "pick from those or use cpu:0,cpu:1")


def default_devices() -> list[Device]:
    """Every visible GPU plus the CPU; with no GPU, the cores split into two virtual CPU devices."""
    gpus = [Device("cuda", i) for i in range(cuda_count())]
    if gpus:
        return gpus + [Device("cpu", None)]
    cores = os.cpu_count() or 2
    per = max(1, cores // 2)
    return [Device("cpu", 0, threads=per), Device("cpu", 1, threads=per)]


def physical_memory() -> int | None:
    """This machine's RAM in bytes; None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def cpu_model_name() -> str:
    """This machine's CPU model as /proc/cpuinfo names it (else what `platform` knows), for records
    of what a figure was measured on."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"
