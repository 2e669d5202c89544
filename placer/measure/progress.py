"""What a long phase says while it runs: a line when it starts (what it does, how long it may take,
the option that shortens it), then a progress line at most every `EVERY_S` seconds, through the
caller's `report` (a command prints to stderr; a library call logs)."""

from __future__ import annotations

import time
from collections.abc import Callable

from placer.measure.rounds import RoundsProtocol, RoundsResult

# A reader follows a line every ten seconds; a line every round of a fast graph is a wall of text.
EVERY_S = 10.0
Report = Callable[[str], None]


class Progress:
    """`start(text)` always reports; calling it with a line reports it only when `every_s` seconds
    have passed since the last line."""

    def __init__(self, report: Report, every_s: float = EVERY_S, clock: Callable[[], float] = time.monotonic):
        self.report, self.every_s, self.clock = report, every_s, clock
        self.last = -float("inf")

    def start(self, text: str) -> None:
        self.report(text)
        self.last = self.clock()

    def __call__(self, text: str) -> None:
        now = self.clock()
        if now - self.last >= self.every_s:
            self.report(text)
            self.last = now


def rounds_text(protocol: RoundsProtocol) -> str:
    """'3 blocks of 10-40 interleaved rounds, at most 180 s': how long rounds may take."""
    blocks = f"{protocol.blocks} blocks of " if protocol.blocks > 1 else ""
    return f"{blocks}{protocol.min_rounds}-{protocol.max_rounds} interleaved rounds, at most {protocol.max_seconds:g} s"


def rounds_progress(progress: Progress, what: str) -> Callable[[int, RoundsResult], None]:
    """The `progress` argument of `measure_in_rounds`: 'WHAT: round 12 (block 2 of 3), 45 s of at
    most 180 s', at most every `progress.every_s` seconds."""
    def tell(rounds: int, result: RoundsResult) -> None:
        p = result.protocol
        block = f" (block {result.blocks[-1] + 1} of {p.blocks})" if p.blocks > 1 and result.blocks else ""
        progress(f"{what}: round {rounds}{block}, {result.seconds:.0f} s of at most {p.max_seconds:g} s")
    return tell
