"""The searched plans' rows in a simulated comparison: placer's local search over plans
(`plan_search`) and FlexFlow's MCMC (`mcmc`), each from the fastest of the comparison's
placements (each a plan) and the plans users run (DDP's; FSDP's on a training step), at the same
budget of simulated plans. Each row is the plan's own simulation, of an inference step
(`placer.plans.pricing`) or a training step (`placer.plans.training`) as the comparison's, so
placer's plan is never slower than the fastest row it started from. A pipelined step is not
searched so far.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from placer.evaluate.compare import CompareRow
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster
from placer.placement import Placement
from placer.plans import mcmc, search
from placer.plans.plan import Plan

SEARCHES = {search.NAME: search.plan_search, mcmc.NAME: mcmc.mcmc}


def searched_rows(graph: OpGraph, cluster: Cluster, devices: list[str], names, placements: Mapping[str, Placement],
                  plans: Mapping[str, Plan], samples: int | None = None, seed: int = 0,
                  training=None, pipelined: bool = False) -> tuple[list[CompareRow], list[str]]:
    """A row per search in `names` (of `SEARCHES`) over `devices`, from the best of `placements`
    and `plans` (row name -> each), and a note for each that does not apply."""
    if pipelined:
        return [], [f"{', '.join(names)}: not simulated; plans are searched on one step, not a pipelined one, so far"]
    starts = {**{name: Plan.from_placement(p) for name, p in placements.items()}, **plans}
    if not starts:
        return [], [f"{', '.join(names)}: not simulated; no placement or plan to start from"]
    rows = []
    for name in names:
        begun = time.perf_counter()
        found = SEARCHES[name](graph, cluster, starts, devices, samples=samples or search.SAMPLES, seed=seed,
                               training=training)
        split = sum(1 for op in found.plan.ops.values() if not op.whole)
        note = (f"a plan found by {'local search' if name == search.NAME else 'MCMC'} over plans from "
                f"{found.start} ({found.start_time * 1e3:.3f} ms): {found.samples} plans simulated, "
                f"{found.plans_per_second:.1f} plans/s; {split} of {len(found.plan.ops)} ops split")
        m = found.measurement
        rows.append(CompareRow(name, name, True, time.perf_counter() - begun, measurement=m, note=note,
                               predicted_step_time=m.step_time if m is not None and m.ok else None, plan=True,
                               split_plan=found.plan))
    return rows, []
