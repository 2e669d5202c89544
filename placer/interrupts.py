"""Ctrl-C held back while state changes, so that a save never records half of a step."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Any, Iterator


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold Ctrl-C until the block ends, so an update is never half applied."""
    pending: list[Any] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda *a: pending.append(a))
    except ValueError:  # not the main thread: nothing to defer
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            raise KeyboardInterrupt
