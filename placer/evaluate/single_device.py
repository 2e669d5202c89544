"""The best single device a training run names: one rule for its summary and its closing comparison.

A run's summary picks its best single device from the confirmation's rounds at the end of training
(`placer.policy.run_summary`), its closing comparison from its own rounds, minutes later; under
noise two devices within a few percent of each other can swap places between the two. The run
then named two different devices. The rule: where there is a closing comparison, its figures
decide, and the summary takes them (`adopt_best_single`): the device, the single devices' step
times and the placement's speedup over that device, with its paired interval and verdict, as the
comparison's "learned" row (placement.json) has them.
"""

from __future__ import annotations

from typing import Any

from placer.evaluate.compare import Comparison
from placer.measure.intervals import verdict_record

SINGLE = "single:"   # the comparison's single-device rows are named single:<device>
LEARNED = "learned"  # the comparison's row of the run's placement.json


def best_single_figures(comparison: Comparison) -> dict[str, Any]:
    """The summary's single-device figures as `comparison` measured them (keys as summary.json
    has them); {} when no single device ran there."""
    if comparison.best_single is None:
        return {}
    learned = comparison.row(LEARNED)
    paired = learned.vs_best_single if learned is not None else None
    return {"single_device_step_times": {r.name.removeprefix(SINGLE): r.step_time
                                         for r in comparison.rows if r.placer == "single"},
            "best_single_device": comparison.best_single.removeprefix(SINGLE),
            "best_single_device_step_time": comparison.best_single_step_time,
            "speedup_vs_best_single_device": learned.speedup_vs_best_single if learned is not None else None,
            "vs_best_single_device": {"speedup": paired.to_dict(), **verdict_record(paired)} if paired else None}


def adopt_best_single(summary, comparison: Comparison | None):
    """`summary` (summary.json's keys, set by item) naming the best single device `comparison`
    names, with its figures; unchanged without a comparison. Returns `summary`."""
    if comparison is not None:
        for key, value in best_single_figures(comparison).items():
            summary[key] = value
    return summary
