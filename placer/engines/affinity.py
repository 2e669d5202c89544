"""Devices that do not trade cores: each virtual CPU device's worker thread is pinned to its own.

Two 1-thread virtual CPU devices on a 2-core machine run in parallel only if the scheduler keeps
them apart; left alone it may put both on one core for a while, or move one onto the core the other
just warmed. Pinning each device's worker thread (and the OpenMP threads it starts, which inherit
its mask) to its own cores takes that choice away. The mask is the worker thread's own: it ends
with the thread, and the caller's threads keep theirs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import torch

from placer.devices import Device

log = logging.getLogger(__name__)
_warned = False


def core_sets(devices: Sequence[Device], threads: dict[str, int | None]) -> dict[str, frozenset[int]]:
    """Device name -> the cores its worker is pinned to: consecutive cores of this process's
    affinity, as many as the device's threads, for every virtual CPU device (`cpu:K`). Empty (and
    said once) when the cores do not go round or the platform cannot pin threads."""
    virtual = [d for d in devices if d.kind == "cpu" and d.index is not None]
    if not virtual or not hasattr(os, "sched_setaffinity"):
        return {}
    cores = sorted(os.sched_getaffinity(0))
    wanted = sum(threads.get(d.name) or 1 for d in virtual)
    if wanted > len(cores):
        _say_once(f"the virtual CPU devices want {wanted} cores but this process may use {len(cores)}: "
                  "they share cores, so their timings disturb each other; give each device fewer threads")
        return {}
    sets, start = {}, 0
    for d in virtual:
        n = threads.get(d.name) or 1
        sets[d.name] = frozenset(cores[start:start + n])
        start += n
    return sets


def pin_this_thread(cores: frozenset[int]) -> None:
    """Pin the calling thread (not the process: Linux masks are per thread) to `cores`."""
    try:
        os.sched_setaffinity(0, cores)
    except OSError as exc:
        _say_once(f"cannot pin a device's worker to cores {sorted(cores)} ({exc}); devices may share cores")


def _say_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning(message)


def cpu_threads(device: Device, devices: list[Device]) -> int:
    """Intra-op threads of a CPU device: its `threads` option, else its share of the cores."""
    if device.threads:
        return device.threads
    if device.index is None:
        return torch.get_num_threads()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n_cpu = sum(d.kind == "cpu" for d in devices)
    return max(1, cores // max(1, n_cpu))


def threads_and_cores(devices: list[Device]) -> tuple[dict[str, int | None], dict[str, frozenset[int]]]:
    """Each device's intra-op threads (`cpu_threads`; None on a GPU) and the cores its worker is
    pinned to (`placer.engines.affinity.core_sets`), as every engine sets its devices up."""
    threads = {d.name: cpu_threads(d, devices) if d.kind == "cpu" else None for d in devices}
    return threads, core_sets(devices, threads)
