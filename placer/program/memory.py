"""Peak memory of a placement per device, accounted from tensor lifetimes under its schedule.

This is the CPU's measure (torch has no allocator statistics there) and, on every device, the
prediction that refuses an over-cap placement before anything is allocated. Each device holds
its resident constants (parameters, folded constants) for the whole step, the graph inputs it
reads, its own outputs until their last local use, and a copy of every tensor it receives from
another device from its first to its last local use. Kernel workspace is not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from placer.program.schedule import DeviceSchedule, Schedule


@dataclass(frozen=True)
class MemoryEstimate:
    """Predicted bytes of one device: resident constants and the peak over its schedule."""

    device: str
    resident: int       # parameters and folded constants
    peak: int           # resident + the largest set of live activations
    peak_step: str | None  # the step at which the peak is reached (None: before any step)


def device_peak(sched: DeviceSchedule, size: Callable[[str], int], held: int = 0,
                received: Callable[[str], int] | None = None) -> MemoryEstimate:
    """Walk one device's steps, adding tensors as they appear and dropping them after last use;
    `held` bytes (a training step's optimizer state) are resident too. `received`: the bytes of a
    copy received from another device where they are not the tensor's `size` where it is made
    (an updated parameter: the owner's parameter itself there, a full copy elsewhere)."""
    received = received or size
    resident = held + sum(size(t) for t in sched.consts)
    live = sum(size(t) for t in sched.feeds)
    peak, peak_step = resident + live, None
    copies: set[str] = set()   # the tensors received here
    for i, step in enumerate(sched.steps):
        copies.update(sched.recv[i])
        live += sum(received(t) for t in sched.recv[i])
        live += sum(size(t) for t in step.outputs if t)
        if resident + live > peak:
            peak, peak_step = resident + live, step.name
        live -= sum(received(t) if t in copies else size(t) for t in sched.frees[i])
    return MemoryEstimate(sched.device, resident, peak, peak_step)


def predict_peak_memory(schedule: Schedule, size: Callable[[str], int],
                        held: Mapping[str, int] | None = None,
                        received: Callable[[str], int] | None = None) -> dict[str, MemoryEstimate]:
    """Device name -> its predicted peak, for every device of the schedule (`held`: extra
    resident bytes per device; `received`: as `device_peak`)."""
    held = held or {}
    return {d: device_peak(s, size, held.get(d, 0), received) for d, s in schedule.per_device.items()}
