"""`MeasurementCache`: the one memory of what the learner has measured.

Once the policy converges it samples the same placements again and again; measuring them again
would only cost time. The trainer is the one that needs this, so the trainer owns the cache:
measurers measure every placement they are given. Placements are keyed by their device index per
group (the grouping is fixed for a run), which is cheap and checkpoints small. A batch is sent to
the measurer in one `measure_many` call when it has one (a pool of workers measures it at once),
with each distinct uncached placement in it once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from placer.measure.measurement import Measurement, Measurer, MeasuresBatches
from placer.placement import Placement

log = logging.getLogger(__name__)

Key = tuple[int, ...]


def measure_many(measurer: Measurer, placements: list[Placement]) -> list[Measurement]:
    """Measure `placements` in order, in one call when the measurer can take a batch."""
    if isinstance(measurer, MeasuresBatches):
        return list(measurer.measure_many(placements))
    return [measurer.measure(p) for p in placements]


class MeasurementCache:
    """Measurements of group placements by `measurer`, each taken once; counts hits and misses."""

    def __init__(self, measurer: Measurer, expand: Callable[[Sequence[int]], Placement], n_groups: int) -> None:
        self.measurer = measurer
        self.expand = expand            # device index per group -> the Placement to measure
        self.n_groups = n_groups
        self.entries: dict[Key, dict[str, Any]] = {}
        self.hits = 0
        self.misses = 0

    def measure_many(self, group_devices: Sequence[Sequence[int]]) -> list[Measurement]:
        """The measurement of every assignment in order; a repeat (in the cache or earlier in the
        batch) is answered from memory and marked ``cached``."""
        keys = [tuple(int(d) for d in a) for a in group_devices]
        new = list(dict.fromkeys(k for k in keys if k not in self.entries))
        for key, m in zip(new, measure_many(self.measurer, [self.expand(k) for k in new])):
            self.entries[key] = m.to_dict()
        fresh, out = set(new), []
        for key in keys:
            first = key in fresh
            fresh.discard(key)
            self.misses += first
            self.hits += not first
            out.append(Measurement.from_dict({**self.entries[key], "cached": not first}))
        return out

    def measure(self, group_devices: Sequence[int]) -> Measurement:
        """`measure_many` of one assignment."""
        return self.measure_many([group_devices])[0]

    def hit_rate(self) -> float:
        return self.hits / max(1, self.hits + self.misses)

    def counters(self) -> tuple[int, int, int]:
        """(hits, misses, entries): what `rollback` returns to."""
        return self.hits, self.misses, len(self.entries)

    def rollback(self, counters: tuple[int, int, int]) -> None:
        """Forget what was measured since `counters()` was taken (an interrupted batch)."""
        self.hits, self.misses, n = counters
        for key in list(self.entries)[n:]:
            del self.entries[key]

    def state(self) -> dict[str, Any]:
        """Everything needed to restore the cache exactly (for checkpoints)."""
        return {"entries": [[list(k), v] for k, v in self.entries.items()], "hits": self.hits, "misses": self.misses}

    def load_state(self, state: dict[str, Any] | None) -> None:
        """Restore what `state` returned. Caches of older checkpoints, keyed by node or by digest,
        are dropped: the placements in them are measured again when met."""
        if not state:
            return
        entries = state["entries"]
        if not all(isinstance(k, list) and len(k) == self.n_groups and all(isinstance(d, int) for d in k)
                   for k, _ in entries):
            log.warning("the checkpoint's measurement cache is of an older format; starting it empty")
            return
        self.entries = {tuple(k): v for k, v in entries}
        self.hits, self.misses = int(state["hits"]), int(state["misses"])
