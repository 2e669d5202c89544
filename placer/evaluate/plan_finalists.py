"""The last step of placer's plan search on this machine's devices: the plans it predicted fastest,
measured for real, and the fastest of them kept.

The profile predicts a plan from its op times (a shard its op's share of the work), and on CPU
devices that share is off where it matters: rnnlm's batch shards take more than their share of
the whole op's time, so the profile ranks data parallelism ahead of a placement that measures 20%
faster (`benchmarks/README.md`, `plan_fidelity.py`). So the search's plan and the best-predicted
of the plans it started from (the placements and the plans users run) are measured side by side
in a few interleaved rounds, and the fastest measured is the search's answer, as `placer train`
keeps the placement that measures fastest, not the one the simulator liked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.measure.intervals import MIN_ROUNDS_FOR_INTERVAL
from placer.measure.rounds import Candidate, RoundsProtocol, measure_in_rounds
from placer.plans.plan import Plan
from placer.plans.space import plan_key

FINALISTS = 6   # measured for real: the search's plan and the best-predicted starts
# a short look: enough rounds for a median, capped so that a zoo model's finalists take a minute or two
ROUNDS = RoundsProtocol(warmup=1, min_rounds=MIN_ROUNDS_FOR_INTERVAL, max_rounds=MIN_ROUNDS_FOR_INTERVAL,
                        max_seconds=150.0)


def finalists(graph: OpGraph, ranked: Sequence[tuple[str, Plan]], runs: Callable[[Plan], None],
              limit: int = FINALISTS) -> dict[str, Plan]:
    """The first `limit` of the `ranked` (name, plan) pairs, each plan once, only those `runs`
    accepts (it raises `PlacerError` where the engine cannot run one)."""
    chosen, keys = {}, set()
    for name, plan in ranked:
        key = plan_key(graph, plan)
        if key in keys or len(chosen) >= limit:
            continue
        try:
            runs(plan)
        except PlacerError:
            continue
        chosen[name], keys = plan, keys | {key}
    return chosen


def runnable_finalists(graph: OpGraph, ranked: Sequence[tuple[str, Plan]], measurer,
                       limit: int = FINALISTS) -> dict[str, Plan]:
    """`finalists` among the plans `measurer`'s engine runs (ONNX Runtime: none with collectives)."""
    from placer.plans.engine import check_runs

    return finalists(graph, ranked, lambda plan: check_runs(measurer.engine.name, graph=graph, plan=plan), limit)


def found_name(found) -> str:
    """A search's plan by name among the finalists: its start's where no move improved on it."""
    return "the search's plan" if found.improvements else found.start


def by_prediction(starts: Mapping[str, Plan], predicted: Callable[[Plan], float]) -> list[tuple[str, Plan]]:
    """The `starts` (name -> plan), fastest `predicted` first."""
    return sorted(starts.items(), key=lambda item: predicted(item[1]))


def measure_finalists(plans: Mapping[str, Plan], measurer, protocol: RoundsProtocol = ROUNDS) -> dict[str, float]:
    """Each plan's median step time over interleaved rounds in `measurer`'s engine; the plans that
    fail are left out."""
    result = measure_in_rounds([Candidate(name, partial(measurer.open, plan), measurer.run_record())
                                for name, plan in plans.items()], protocol)
    return {name: result.interval(name).value for name in plans if result.measurements[name].ok}


def fastest_measured(plans: Mapping[str, Plan], measured: Mapping[str, float]) -> str | None:
    """The name of the plan measured fastest (the first of `plans` where none ran)."""
    ran = [name for name in plans if name in measured]
    return min(ran, key=lambda name: measured[name]) if ran else next(iter(plans), None)
