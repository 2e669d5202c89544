"""`CachingMeasurer`: answers a placement measured before from memory, marked ``cached``.

Training samples the same placement many times once the policy converges; measuring it again
would only cost time. The cache is plain data (placement key -> measurement dict) so that
checkpoints can save and restore it.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from placer.measure.measurement import Measurement, Measurer
from placer.placement import Placement


class CachingMeasurer:
    """Wraps any `Measurer`; counts hits and misses for the cache hit rate."""

    def __init__(self, measurer: Measurer) -> None:
        self.inner = measurer
        self.devices = list(measurer.devices)
        self.entries: dict[Hashable, dict[str, Any]] = {}
        self.hits = 0
        self.misses = 0

    def key(self, placement: Placement) -> Hashable:
        """What identifies `placement` in the cache: its whole assignment."""
        return placement.key()

    def measure(self, placement: Placement) -> Measurement:
        """The cached measurement of `placement`, or a fresh one (then remembered)."""
        key = self.key(placement)
        entry = self.entries.get(key)
        if entry is not None:
            self.hits += 1
            return Measurement.from_dict({**entry, "cached": True})
        self.misses += 1
        measurement = self.inner.measure(placement)
        self.entries[key] = measurement.to_dict()
        return measurement

    def state(self) -> dict[str, Any]:
        """Everything needed to restore the cache exactly (for checkpoints)."""
        return {"entries": [[self._key_to_state(k), v] for k, v in self.entries.items()],
                "hits": self.hits, "misses": self.misses}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what `state` returned."""
        self.entries = {self._key_from_state(k): v for k, v in state["entries"]}
        self.hits, self.misses = int(state["hits"]), int(state["misses"])

    @staticmethod
    def _key_to_state(key: Hashable) -> Any:
        return list(key)

    @staticmethod
    def _key_from_state(item: Any) -> Hashable:
        return tuple(item)
