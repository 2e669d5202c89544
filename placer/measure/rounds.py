"""Interleaved rounds: several candidates measured side by side, so that the machine's drift cancels.

A shared machine's speed drifts by up to 2x over minutes, so a placement measured in one block
after another is judged by when it ran. Here every candidate is built once (`PlacedRun`),
warmed up, then measured in rounds: each round steps every candidate once, in a shuffled order.
A candidate's figure is its median over rounds with its interval, and its ratio to a reference
measured in the same rounds (paired: one ratio per round) with its interval
(`placer.measure.intervals`). Rounds go on until every interval is within the requested precision,
or until a cap in rounds or seconds; the result says which (after torch.utils.benchmark's
`adaptive_autorange` and pyperf).

Rounds inside one build do not show how far the next run moves: what a build leaves (threads that
spin, where memory lands, a session's pools) changes from run to run. So the rounds may run in
several blocks (`RoundsProtocol.blocks`): in each, every candidate is built afresh, warmed up,
measured in rounds and closed, and every interval spans the blocks as well as the rounds
(`placer.measure.intervals.interval_over_blocks`). pyperf runs fresh processes instead; here a block
keeps the process (a fresh one would load torch, the graph and its prepared kernels again for every
block, and the rows that open their own runs are closures that do not cross a process), so what a
process holds for its life (torch's OpenMP pool, the allocator's cache) stays shared between blocks.

A candidate that fails (to build, or in a round: out of memory, a timeout, a kernel error) becomes a
failed `Measurement` and leaves the rounds; the others go on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from placer.errors import PlacerError
from placer.measure.intervals import MIN_ROUNDS_FOR_INTERVAL, Interval, interval_over_blocks
from placer.engines.protocol import PlacedRun
from placer.measure.measurement import Measurement
from placer.measure.measurer import failed_measurement

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundsProtocol:
    """How candidates are measured side by side; recorded in every `Measurement` it makes."""

    warmup: int = 2            # untimed steps of each candidate first (interleaved too)
    min_rounds: int = 10       # at least this many a block, so that a 95% interval exists (6 at least)
    max_rounds: int = 40       # cap a block: stop here even when an interval is still wider than `precision`
    max_seconds: float = 180.0 # cap in wall-clock seconds of all blocks (builds and warm-ups included), shared evenly
    precision: float = 0.02    # stop a block once every interval in it reaches at most this far from its value
    seed: int = 0              # of the round order
    blocks: int = 1            # every candidate built afresh this many times, rounds in each

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.min_rounds < MIN_ROUNDS_FOR_INTERVAL or self.max_rounds < self.min_rounds:
            raise PlacerError(f"rounds need warmup >= 0 and {MIN_ROUNDS_FOR_INTERVAL} <= min_rounds <= max_rounds "
                              f"(a 95% interval of a median needs {MIN_ROUNDS_FOR_INTERVAL} rounds)")
        if not self.max_seconds > 0 or not self.precision > 0:
            raise PlacerError("rounds need max_seconds > 0 and precision > 0")
        if self.blocks < 1:
            raise PlacerError("rounds need at least 1 block: --blocks 1 measures in one, 3 or more give intervals "
                              "that hold the variation between runs")

    def to_dict(self) -> dict[str, Any]:
        if self.blocks == 1:
            return {**asdict(self), "statistic": "median over interleaved rounds", "interval": "95%, order statistics"}
        return {**asdict(self), "statistic": "geometric mean over blocks of the median over interleaved rounds",
                "interval": "95%, Student t over the block medians (log scale)"}


@dataclass
class Candidate:
    """One thing to measure: a name and how to build its `PlacedRun` (raising on failure)."""

    name: str
    open: Callable[[], PlacedRun]
    record: dict[str, Any] = field(default_factory=dict)   # how it runs (devices, engine), kept in its Measurement


@dataclass
class RoundsResult:
    """Every candidate's measurement, the raw rounds, and whether a cap ended them."""

    measurements: dict[str, Measurement]
    reference: str | None              # the candidate every `paired` ratio is taken against
    rounds: int
    capped: str | None                 # None (every interval reached the precision), "rounds" or "seconds"
    seconds: float
    order: list[list[str]]             # the order each round ran its candidates in
    times: dict[str, list[float | None]]   # candidate -> seconds per round (None: not run that round)
    protocol: RoundsProtocol
    blocks: list[int] = field(default_factory=list)   # the block each round ran in

    def ratio(self, name: str, reference: str, block: int | None = None) -> Interval | None:
        """`name`'s time over `reference`'s, paired over the rounds both ran, over every block (or
        in `block` only); None when they ran no round together."""
        a, b = self.times.get(name, []), self.times.get(reference, [])
        return self._over_blocks([x / y if x is not None and y is not None else None for x, y in zip(a, b)], block)

    def interval(self, name: str, block: int | None = None) -> Interval | None:
        """`name`'s step time over every block (or in `block` only); None when it ran no round."""
        return self._over_blocks(self.times.get(name, []), block)

    def _over_blocks(self, per_round: list[float | None], block: int | None) -> Interval | None:
        groups: dict[int, list[float]] = {}
        for x, b in zip(per_round, self.blocks):
            if x is not None and (block is None or b == block):
                groups.setdefault(b, []).append(x)
        return interval_over_blocks(list(groups.values())) if groups else None

    def cap_note(self) -> str | None:
        """One line when a cap stopped the rounds before every interval reached the precision."""
        if self.capped is None:
            return None
        blocks = self.protocol.blocks
        cap = (f"{self.protocol.max_rounds} rounds" if self.capped == "rounds"
               else f"{self.protocol.max_seconds / blocks:g} s")
        where = f"stopped at the cap of {cap} a block ({self.rounds} rounds in {blocks} blocks)" \
            if blocks > 1 else f"stopped at the cap of {cap} after {self.rounds} rounds"
        return f"{where}: some intervals are still wider than +-{self.protocol.precision:.0%}"


def measure_in_rounds(candidates: Sequence[Candidate], protocol: RoundsProtocol = RoundsProtocol(),
                      reference: str | None = None,
                      progress: Callable[[int, RoundsResult], None] | None = None) -> RoundsResult:
    """Measure `candidates` in interleaved rounds, in `protocol.blocks` blocks; `reference` (default:
    the first) is what every paired ratio is taken against. In each block every candidate still
    running is built before its first round and closed after its last."""
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise PlacerError(f"candidates need distinct names: {names}")
    rng = np.random.default_rng(protocol.seed)
    failed: dict[str, Measurement] = {}
    peaks: dict[str, dict] = {}   # each candidate's peak memory in the last block it ran
    records = {c.name: {**c.record, "rounds": protocol.to_dict()} for c in candidates}
    start = time.perf_counter()
    result = RoundsResult({}, reference, 0, None, 0.0, [], {n: [] for n in names}, protocol)
    for block in range(protocol.blocks):
        runs: dict[str, PlacedRun] = {}
        block_start = time.perf_counter()
        try:
            for c in candidates:
                if c.name in failed:
                    continue
                try:
                    runs[c.name] = c.open()
                except Exception as exc:  # noqa: BLE001 - a candidate that cannot be built is a measured failure
                    failed[c.name] = failed_measurement(exc, records[c.name])
            _rounds_of_block(block, runs, failed, records, result, rng, reference, progress, start, block_start)
        finally:
            for name, run in runs.items():
                peaks[name] = dict(run.peak_memory)
                run.close()
    result.measurements = {n: failed[n] if n in failed else _measurement(result, n, records[n], peaks[n])
                           for n in names}
    result.seconds = time.perf_counter() - start
    if result.capped:
        log.info(result.cap_note())
    return result


def _rounds_of_block(block: int, runs: dict[str, PlacedRun], failed: dict[str, Measurement], records,
                     result: RoundsResult, rng: np.random.Generator, reference: str | None, progress,
                     start: float, block_start: float) -> None:
    """One block: warm-up steps, then rounds until every interval of the block reaches the precision
    or the block's cap in rounds or seconds (its share of `max_seconds`, its build included)."""
    protocol, names = result.protocol, list(result.times)
    first_round = len(result.order)
    for _ in range(protocol.warmup):
        for name in _shuffled(runs, rng):
            _step(name, runs, failed, records)
    while runs:
        this_round = _shuffled(runs, rng)
        result.order.append(this_round)
        result.blocks.append(block)
        got = {name: _step(name, runs, failed, records) for name in this_round}
        for name in names:
            result.times[name].append(got.get(name))
        result.rounds = len(result.order)
        result.seconds = time.perf_counter() - start
        result.reference = _reference(reference, names, runs)
        if progress is not None:
            progress(result.rounds, result)
        done = result.rounds - first_round
        if done >= protocol.min_rounds and _precise(result, list(runs), block):
            return
        if done >= protocol.max_rounds:
            result.capped = "rounds"
            return
        if time.perf_counter() - block_start >= protocol.max_seconds / protocol.blocks:
            result.capped = "seconds"
            return


def _shuffled(runs: dict[str, PlacedRun], rng: np.random.Generator) -> list[str]:
    names = list(runs)
    return [names[i] for i in rng.permutation(len(names))]


def _step(name: str, runs: dict[str, PlacedRun], failed: dict[str, Measurement], records) -> float | None:
    """One step of `name`; a failure closes it, records why, and takes it out of the rounds."""
    run = runs.get(name)
    if run is None:
        return None
    try:
        return run.step()
    except Exception as exc:  # noqa: BLE001 - a failing placement is a measured failure, not a crash
        log.info("%s failed: %s", name, exc)
        failed[name] = failed_measurement(exc, records[name], getattr(run, "peak_memory", None))
        run.close()
        del runs[name]
        return None


def _reference(wanted: str | None, names: list[str], alive: dict) -> str | None:
    """The reference asked for while it still runs, else the first candidate still running."""
    if wanted is not None and wanted in alive:
        return wanted
    return next((n for n in names if n in alive), None)


def _precise(result: RoundsResult, alive: list[str], block: int) -> bool:
    """Every paired ratio to the reference in `block` (or, alone, the reference's own median) within precision."""
    ref = result.reference
    if ref is None:
        return True
    others = [n for n in alive if n != ref]
    widths = ([result.ratio(n, ref, block).relative_half_width for n in others] if others
              else [result.interval(ref, block).relative_half_width])
    return max(widths) <= result.protocol.precision


def _measurement(result: RoundsResult, name: str, record: dict, peak_memory: dict) -> Measurement:
    got = [t for t in result.times[name] if t is not None]
    own = result.interval(name)
    q1, q3 = np.percentile(got, [25, 75])
    paired = None
    if result.reference is not None and name != result.reference:
        ratio = result.ratio(name, result.reference)
        paired = {"reference": result.reference, **ratio.to_dict()} if ratio is not None else None
    return Measurement(ok=True, step_time=own.value, spread=float(q3 - q1), times=got,
                       peak_memory=peak_memory, interval=own.to_dict(), paired=paired,
                       protocol={**record, "rounds_run": result.rounds, "blocks_run": len(set(result.blocks)),
                                 "capped": result.capped})
