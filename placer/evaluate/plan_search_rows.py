"""The searched plans' rows in a simulated comparison: placer's local search over plans
(`plan_search`), FlexFlow's MCMC (`mcmc`) and REINFORCE over plans (`plan_reinforce`), each
from the fastest of the comparison's placements (each a plan) and the plans users run (DDP's; FSDP's on a training step), at the same
budget of simulated plans. Each row is the plan's own simulation, of an inference step
(`placer.plans.pricing`) or a training step (`placer.plans.training`) as the comparison's, so
placer's plan is never slower than the fastest row it started from. A pipelined step is not
searched so far.

A model of more than `placer.plans.reduced.LARGE` nodes built of repeated blocks (a transformer's
layers) is searched, on an inference step, on a copy of it with one block per accelerator
(`placer.plans.reduced`): a plan of a 70B model lowers to over 100,000 nodes, a few seconds a
sample. The plan found is mapped back and simulated on the whole graph, and is kept only where it
is faster there than the start it began from; the row never shows a figure of the reduced copy.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from placer.evaluate.compare import CompareRow
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster
from placer.measure.measurement import Measurement
from placer.placement import Placement
from placer.plans import exact_plans, mcmc, search
from placer.devices import device_kind
from placer.plans.plan import Plan
from placer.plans.pricing import simulate_plan
from placer.plans.reduced import Reduced, ReducedScorer, reduce

# the searches of this layer; a learner's (`placer.policy.plan_reinforce`) is handed down by the jobs
SEARCHES = {search.NAME: search.plan_search, mcmc.NAME: mcmc.mcmc, exact_plans.NAME: exact_plans.plan_exact}
BY = {search.NAME: "local search", mcmc.NAME: "MCMC", exact_plans.NAME: "CP-SAT", "plan_reinforce": "REINFORCE"}


def searched_rows(graph: OpGraph, cluster: Cluster, devices: list[str], names, placements: Mapping[str, Placement],
                  plans: Mapping[str, Plan], samples: int | None = None, seed: int = 0,
                  training=None, pipelined: bool = False, searches: Mapping[str, Callable] = SEARCHES,
                  measured: Mapping[str, Measurement] | None = None) -> tuple[list[CompareRow], list[str]]:
    """A row per search in `names` (of `searches`, name -> function) over `devices`, from the best of
    `placements` and `plans` (row name -> each), and a note for each that does not apply.
    `measured`: the plans' simulations on the whole graph where their rows made them already."""
    if pipelined:
        return [], [f"{', '.join(names)}: not simulated; plans are searched on one step, not a pipelined one, so far"]
    starts = {**{name: Plan.from_placement(p) for name, p in placements.items()}, **plans}
    if not starts:
        return [], [f"{', '.join(names)}: not simulated; no placement or plan to start from"]
    rows = []
    # a large model of repeated blocks is searched on a few of them (inference steps so far)
    reduced = reduce(graph, _kept_blocks(devices)) if training is None else None
    for name in names:
        begun = time.perf_counter()
        samples = samples or search.SAMPLES
        if reduced is None:
            found = searches[name](graph, cluster, starts, devices, samples=samples, seed=seed, training=training)
            m, plan, where = found.measurement, found.plan, ""
        else:
            found, plan, m = _search_reduced(searches[name], reduced, cluster, starts, devices, samples, seed,
                                             measured or {})
            where = (f" on {reduced.kept} of its {reduced.blocks} repeated blocks "
                     f"({len(reduced.graph.nodes)} of {len(graph.nodes)} nodes), the plan found simulated on the whole")
        split = sum(1 for op in plan.ops.values() if not op.whole)
        note = (f"a plan found by {BY[name]} over plans from "
                f"{found.start} ({found.start_time * 1e3:.3f} ms): {found.samples} plans simulated{where}, "
                f"{found.plans_per_second:.1f} plans/s; {split} of {len(plan.ops)} ops split")
        rows.append(CompareRow(name, name, True, time.perf_counter() - begun, measurement=m, note=note,
                               predicted_step_time=m.step_time if m is not None and m.ok else None, plan=True,
                               split_plan=plan))
    return rows, []


def _kept_blocks(devices: list[str]) -> int:
    """Blocks a reduced search keeps: one per accelerator (two at least), so that a pipeline over
    every device is a plan of the reduced model."""
    gpus = [d for d in devices if device_kind(d) == "cuda"]
    return max(2, len(gpus))


def _search_reduced(searcher, reduced: Reduced, cluster: Cluster, starts: Mapping[str, Plan], devices: list[str],
                    samples: int, seed: int, measured: Mapping[str, Measurement]):
    """`searcher` on the reduced graph from the reduced `starts`; the plan found on the whole graph
    and its simulation there, or the start it began from where that is as fast (so the row is
    never slower than its start): two of the samples go to those simulations (the start's taken
    from `measured` where its row simulated it: a 10,000-node plan is seconds to simulate)."""
    scorer = ReducedScorer(reduced, cluster, max(1, samples - 2))
    found = searcher(reduced.graph, cluster, {n: reduced.to_reduced(p) for n, p in starts.items()}, devices,
                     samples=scorer.samples, seed=seed, scorer=scorer)
    start = starts[found.start]
    plan = reduced.to_full(found.plan)
    m = simulate_plan(reduced.full, plan, cluster)
    started = measured.get(found.start) or simulate_plan(reduced.full, Plan(list(devices), dict(start.ops),
                                                                            reduced.full.sha256), cluster)
    if not m.ok or (started.ok and started.step_time <= m.step_time):
        plan, m = start, started
    found.samples += 1 + (found.start not in measured)   # the start's row simulated it already
    found.start_time = started.step_time if started.ok else math.inf   # the note gives the whole graph's
    return found, plan, m
