"""`PairedMeasurer`: real rewards that measure the placement, not the moment.

The trainer measures a batch of new placements at a time; measured one after the other, minutes
apart, their figures would be decided by the machine's drift. Here each batch runs in interleaved
rounds together with a reference placement (the best single device), and a placement's figure is
its paired ratio to the reference in those rounds times one fixed anchor: the reference's median
in the run's first batch. So every figure of a run is in the same unit, and a slow minute slows
the reference as much as the batch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from placer.measure.measurement import Measurement
from placer.measure.measurer import RealMeasurer
from placer.measure.rounds import Candidate, RoundsProtocol, measure_in_rounds
from placer.placement import Placement

log = logging.getLogger(__name__)
REFERENCE = "reference"
# Placements open at once beside the reference: a batch is measured in chunks of this many. Each
# open placement holds its engine (ONNX Runtime: a session per partition, each with its weights);
# a whole batch of 64 rnnlm placements open at once ran a 24 GiB machine out of memory.
MAX_OPEN = 16


class PairedMeasurer:
    """A `Measurer` over `real` whose figures are paired ratios to `reference` times the anchor.
    `anchor_file` keeps the anchor across a resumed run."""

    def __init__(self, real: RealMeasurer, reference: Placement, rounds: RoundsProtocol,
                 anchor_file: str | Path | None = None) -> None:
        self.real = real
        self.devices = real.devices
        self.training = getattr(real, "training", None)   # what a step is (the run's identity reads it)
        self.protocol = rounds
        self.reference = reference
        self.rounds = rounds
        self.anchor_file = Path(anchor_file) if anchor_file else None
        self.anchor_s: float | None = None
        if self.anchor_file is not None and self.anchor_file.is_file():
            self.anchor_s = float(json.loads(self.anchor_file.read_text())["anchor_s"])

    def protocol_record(self) -> dict:
        return {**self.real.run_record(), "rounds": self.rounds.to_dict(), "paired_with": "best single device",
                "anchor_s": self.anchor_s}

    def run_record(self) -> dict:
        return self.real.run_record()

    def open(self, placement: Placement):
        return self.real.open(placement)

    def measure(self, placement: Placement) -> Measurement:
        return self.measure_many([placement])[0]

    def measure_many(self, placements: Sequence[Placement]) -> list[Measurement]:
        """Each placement's measurement, its figure the paired ratio to the reference times the
        anchor (in chunks of `MAX_OPEN`, each in rounds with the reference); unpaired medians (and
        said so) if the reference itself fails."""
        return [m for i in range(0, len(placements), MAX_OPEN)
                for m in self._measure_chunk(placements[i:i + MAX_OPEN])]

    def _measure_chunk(self, placements: Sequence[Placement]) -> list[Measurement]:
        record = self.real.run_record()
        names = [f"placement:{i}" for i in range(len(placements))]
        result = measure_in_rounds([Candidate(REFERENCE, partial(self.real.open, self.reference), record)] +
                                   [Candidate(n, partial(self.real.open, p), record) for n, p in zip(names, placements)],
                                   self.rounds, reference=REFERENCE)
        ref = result.measurements[REFERENCE]
        if not ref.ok:
            log.warning("the reference placement failed (%s); this batch's figures are unpaired medians", ref.reason)
            return [result.measurements[n] for n in names]
        if self.anchor_s is None:
            self._set_anchor(ref.step_time)
        out = []
        for name in names:
            m = result.measurements[name]
            if m.ok:
                ratio = result.ratio(name, REFERENCE)
                m.paired = {"reference": "best single device", **ratio.to_dict()}
                m.step_time = ratio.value * self.anchor_s
                m.protocol = {**m.protocol, "figure": "paired ratio to the reference x its anchor",
                              "anchor_s": self.anchor_s}
            out.append(m)
        return out

    def _set_anchor(self, seconds: float) -> None:
        self.anchor_s = seconds
        if self.anchor_file is not None:
            self.anchor_file.parent.mkdir(parents=True, exist_ok=True)
            self.anchor_file.write_text(json.dumps({"anchor_s": seconds}) + "\n")
