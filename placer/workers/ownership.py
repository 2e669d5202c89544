"""Which devices a worker owns, and whether the workers' devices are alike.

On a GPU node Ray gives each worker its own GPUs (`num_gpus`), which it then sees as cuda:0..D-1:
so a placement names its GPUs cuda:0..D-1. On a CPU node, workers split the node's cores: each
is pinned to its own, so that one worker's runs do not slow another's. A worker whose devices
differ from the others' (kind, model, memory, torch version) would skew the rewards: it is refused.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from placer.errors import PlacerError
from placer.devices import Device, cpu_model_name


def check_gpu_names(devices: list[Device]) -> None:
    """A worker sees its own GPUs as cuda:0..D-1, so the placement must name them so."""
    indices = [d.index for d in devices if d.kind == "cuda"]
    if sorted(indices) != list(range(len(indices))):
        want = ",".join(f"cuda:{i}" for i in range(len(indices)))
        raise PlacerError(f"with --workers, each worker sees its own GPUs as cuda:0, cuda:1, ...: "
                          f"name the devices of one worker {want}, not {','.join(f'cuda:{i}' for i in indices)}")


def fingerprint(devices: list[Device]) -> dict[str, Any]:
    """torch's version and, per device, what decides its speed (runs inside a worker)."""
    import torch

    described = {}
    for d in devices:
        if d.kind == "cuda":
            props = torch.cuda.get_device_properties(d.index)
            described[d.name] = f"{props.name}, {props.total_memory / 2**30:.0f} GiB"
        else:
            described[d.name] = f"{cpu_model_name()}, {d.threads or 1} thread(s)"
    return {"torch version": torch.__version__, "devices": described}


def mismatches(fingerprints: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Worker -> why it differs from the most common fingerprint (ties: the first worker's)."""
    keys = {w: repr(sorted(_flatten(f).items())) for w, f in fingerprints.items()}
    common_key = Counter(keys.values()).most_common(1)[0][0] if keys else None
    common = next((fingerprints[w] for w, k in keys.items() if k == common_key), {})
    reasons = {}
    for worker, f in fingerprints.items():
        if keys[worker] != common_key:
            mine, theirs = _flatten(f), _flatten(common)
            what = next(k for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k))
            reasons[worker] = f"its {what} is {mine.get(what)!r}, the other workers' {theirs.get(what)!r}"
    return reasons


def _flatten(fp: dict[str, Any]) -> dict[str, Any]:
    flat = {}
    for key, value in fp.items():
        if isinstance(value, dict):
            flat.update(_flatten(value))
        else:
            flat[key] = value
    return flat


def split_cores(workers_by_machine: dict[str, list[str]], cores_by_machine: dict[str, list[int]],
                per_worker: int) -> tuple[dict[str, list[int]], dict[str, str]]:
    """Give each worker `per_worker` cores of its machine, none shared: (worker -> cores, worker ->
    why it got none)."""
    given, refused = {}, {}
    for machine, workers in workers_by_machine.items():
        free = sorted(cores_by_machine[machine])
        for worker in workers:
            if len(free) < per_worker:
                refused[worker] = (f"its machine has no {per_worker} free cores left "
                                   f"({len(cores_by_machine[machine])} in all)")
                continue
            given[worker], free = free[:per_worker], free[per_worker:]
    return given, refused


def pin_process(cores: list[int]) -> None:
    """Pin every thread of this process, and those it starts later, to `cores` (Linux)."""
    if not hasattr(os, "sched_setaffinity"):
        return
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), cores)
        except OSError:   # a thread that ended meanwhile
            pass
