"""Warm start from local search: the learner starts where the `local_search` baseline stops.

An iterated local search whose exploration is learned. Local search runs first, exactly as the
`local_search` row of a simulated comparison runs it (same costs, caps, seed and pipeline, the run's
whole --samples as its budget), until its local optimum or the budget; the policy then imitates
its placement and REINFORCE explores around it with the samples it left, the last share of them
polishing the policy's best with local search again. Every placement local search simulated counts
in the run's samples, so the learner is never slower than that baseline at the same sample count:
the baseline's own run is its first phase, and the run keeps the fastest of the three phases.
Where local search spends the whole budget, nothing is left to learn with, and the run says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from placer.graph.grouping import Grouping
from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.placement import Placement
from placer.placers.base import Caps
from placer.policy.budget import REINFORCE, SampleBudget
from placer.policy.warm_start import WarmStart, warm_start_from

SOURCE = "local_search"


@dataclass
class SearchedStart:
    """Local search's run as the learner's first phase: the warm start imitating its placement,
    and what it spent of the budget."""

    warm: WarmStart
    placement: Placement   # local search's placement, node by node
    budget: int            # local search's: the run's --samples when it started
    total: int             # the run's --samples now (more on a --resume that continues it)
    samples: int           # placements it simulated (its starting candidates included)
    local_optimum: bool    # False: it stopped because the budget was spent

    def record(self) -> dict:
        """What summary.json keeps of it."""
        info = self.placement.extra["placer"]
        return {"budget": self.budget, "samples": self.samples, "local_optimum": self.local_optimum,
                "start": info["start"], "start_step_time_s": info["start_step_time"],
                "step_time_s": info["simulated_step_time"], "group_moves": info["group_moves"],
                "node_moves": info["node_moves"], "exact_start": info.get("exact_start")}

    def exhausted_text(self) -> str | None:
        """The plain sentence of a run whose local search left nothing to learn with, else None."""
        if self.total > self.samples:
            return None
        return (f"local search used all {self.budget} samples without reaching a local optimum; "
                "no samples were left to learn with")


def search_warm_start(graph: OpGraph, devices: list[str], cost: CostModel, caps: Caps, grouping: Grouping,
                      samples: int, total: int | None = None, seed: int = 0, pipeline=None,
                      resume: dict | None = None) -> SearchedStart:
    """Run the `local_search` baseline with `samples` as its budget (what `compare` runs at that
    sample count: same start, seed, caps and pipeline) and warm-start on its placement, on
    `grouping` split where it cuts it; `total`: the run's samples (default `samples`). Ctrl-C
    raises local search's `SearchInterrupted`, whose state `resume` continues."""
    from placer.placers.local_search import local_search

    placement = local_search(graph, devices, cost, caps, seed=seed, samples=samples, pipeline=pipeline,
                             resume=resume)
    info = placement.extra["placer"]
    warm = warm_start_from(SOURCE, placement, graph, devices, grouping, info["simulated_step_time"],
                           info["candidates"])
    return SearchedStart(warm, placement, samples, total or samples, info["simulated"], info["local_optimum"])


def reinforce_share(budget: SampleBudget, per_update: int, devices: int, resumed: bool = False) -> tuple[int, int]:
    """How many samples REINFORCE gets of what local search left (`budget`'s allowance, the polish's
    share taken), and its samples per update. Every placement the trainer simulates counts
    (`counts_evaluations`): each of the `devices` single devices first, then per update its samples
    and the greedy placement, so it stops where the next of those would not fit, and the rest goes
    to the polish. One smaller update when a whole one does not fit (at least 2 samples: a batch's
    advantages need two rewards), unless `resumed` (a resumed run keeps its update size)."""
    target = budget.allowance(REINFORCE)
    room = target - devices   # for the updates, each with its greedy placement
    if room >= per_update + 1 or resumed:
        return target, per_update
    if room >= 3:
        return target, room - 1
    return 0, per_update
