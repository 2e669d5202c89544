"""How a step can fail in any engine: each failure carries the reason a `Measurement` records."""

from __future__ import annotations

# Why a placement failed: values of `Measurement.failure` (`placer.measure.measurement` adds INVALID).
OOM, TIMEOUT, KERNEL_ERROR = "oom", "timeout", "kernel_error"


class ExecutionFailure(Exception):
    """A step that could not complete; `failure` is a `Measurement.failure` reason."""

    failure = KERNEL_ERROR

    def __init__(self, message: str, peak_memory: dict[str, int] | None = None) -> None:
        super().__init__(message)
        self.peak_memory = peak_memory or {}   # device -> bytes, where known


class OutOfMemory(ExecutionFailure):
    failure = OOM


class StepTimeout(ExecutionFailure):
    failure = TIMEOUT


class KernelError(ExecutionFailure):
    failure = KERNEL_ERROR


def format_bytes(n: int) -> str:
    """Bytes as a person reads them in a memory error: 1.5 GiB, 12.0 MiB, 300 B."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
