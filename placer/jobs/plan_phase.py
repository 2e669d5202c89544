"""The train job's last search on a described cluster: plans, from the learned placement.

With `--space plans` (the default), once the learner, the polish and local search's
warm start have settled placement.json, the plans users run (DDP, FSDP on a training step,
Megatron's tensor parallelism, pipeline stages replicated, the batch cut by speed) are priced,
and REINFORCE over plans (`placer.policy.plan_reinforce`) searches from the fastest of them and
the learned placement. Every plan priced counts in --samples (`budget.PLANS`, the share
`PLAN_SHARE` set aside before the first phase). The run's plan goes to plan.json, for `placer
apply --placement`, where it is faster than the learned placement; placement.json stays the
learned placement either way, and summary.json's "plan" says what was found and what it drew.
"""

from __future__ import annotations

import time
from pathlib import Path

from placer.jobs.searches import count_samples
from placer.measure.intervals import format_exact_ratio
from placer.policy.budget import PLAN_SHARE, PLANS, SampleBudget
from placer.policy.checkpoint import save_summary
from placer.policy.summary_file import RunSummary

SPACES = ("plans", "placement")
FILENAME = "plan.json"
# the plans users run, priced first: the search starts from the fastest of them and the learned placement
USER_PLANS = ("data_parallel", "fsdp", "tensor_parallel", "pipeline_data", "data_parallel_by_speed")
LEARNER = "plan_reinforce"


def reserve(budget: SampleBudget, searching: bool, least: int = 1) -> None:
    """Set the plans' share of --samples aside where the run is `searching` plans and the share
    holds the `least` a search needs (nothing to set aside when it goes by time); none where it is
    not (a resumed run may change --space), so that no sample is set aside for a search that
    cannot run: the plan phase then says what --samples left it."""
    share = None if budget.total is None else int(budget.total * PLAN_SHARE)
    if searching and share is not None and share >= least:
        budget.reserve(PLANS, share)
    else:
        budget.reserved.pop(PLANS, None)


def search_plans(graph, cluster, devices: list[str], run_dir: Path, summary: RunSummary, budget: SampleBudget,
                 start, seed: int, training=None, pipeline=None, report=print) -> list:
    """Price the plans users run and search plans from them and placement.json (with what the
    ledger allows, else `placer.plans.search.SAMPLES`); plan.json where the plan found beats the
    learned placement. Returns the rows of the plans (the closing comparison shows them)."""
    from placer.evaluate.compare import CompareRow
    from placer.evaluate.plan_rows import plan_rows
    from placer.placement import Placement
    from placer.plans import search
    from placer.plans.plan import Plan
    from placer.policy.plan_reinforce import plan_reinforce

    if pipeline is not None and pipeline.pipelined:
        report("plans: not searched; plans are priced on one step, not a pipelined one, so far")
        return []
    began = time.perf_counter()
    rows, notes = plan_rows(graph, cluster, devices, USER_PLANS, training=training, pipeline=pipeline)
    allowed = budget.allowance(PLANS)
    samples = search.SAMPLES if allowed is None else allowed - len(rows)
    if samples < 1:
        report(f"plans: not searched; --samples leaves {allowed} for plans (raise --samples, or --space placement)")
        return []
    starts = {"learned placement": Plan.from_placement(Placement.load(run_dir / "placement.json")),
              **{r.name: r.split_plan for r in rows if r.split_plan is not None}}
    found = plan_reinforce(graph, cluster, starts, devices, samples=samples, seed=seed, training=training)
    priced = len(rows) + found.samples
    budget.set_drawn(PLANS, priced)
    start.keep_budget(budget)
    placement_s, plan_s = summary["best_step_time"], found.measurement.step_time if found.measurement.ok else None
    faster = plan_s is not None and placement_s is not None and plan_s < placement_s
    users = [r for r in rows if r.step_time is not None]
    fastest = min(users, key=lambda r: r.step_time, default=None)
    split = sum(1 for op in found.plan.ops.values() if not op.whole)
    record = {"step_time": plan_s, "placement_step_time": placement_s,
              "vs_placement": placement_s / plan_s if faster else None, "start": found.start,
              "split_ops": split, "ops": len(found.plan.ops), "samples": priced,
              "fastest_user_plan": fastest.name if fastest else None,
              "fastest_user_plan_step_time": fastest.step_time if fastest else None,
              "file": FILENAME if faster else None, "notes": notes}
    if faster:
        found.plan.save(run_dir / FILENAME)
    elif (run_dir / FILENAME).exists():   # an earlier session's plan that no longer beats placement.json
        (run_dir / FILENAME).unlink()
    summary["plan"] = record
    count_samples(summary, budget)
    save_summary(run_dir, summary)
    report(plan_line(record, run_dir))
    note = (f"the run's plan: REINFORCE over plans from {found.start} ({found.start_time * 1e3:.3f} ms), "
            f"{found.samples} plans simulated; {split} of {len(found.plan.ops)} ops split")
    learned = CompareRow("learned_plan", LEARNER, True, time.perf_counter() - began, measurement=found.measurement,
                         note=note, predicted_step_time=plan_s, plan=True, split_plan=found.plan)
    return rows + [learned]


def plan_line(record: dict, run_dir: Path) -> str:
    """What the plan search found, in one line."""
    if record["step_time"] is None:
        return "plans: no plan the search found fits the devices; placement.json stays the run's"
    if record["file"] is None:
        return (f"plans: none faster than the learned placement ({record['samples']} plans simulated; fastest plan "
                f"users run: {record['fastest_user_plan'] or 'none fits'}); placement.json stays the run's")
    return (f"plan: {record['step_time'] * 1e3:.3f} ms simulated, {format_exact_ratio(record['vs_placement'])} faster than the "
            f"learned placement ({record['split_ops']} of {record['ops']} ops split, {record['samples']} plans "
            f"simulated): {run_dir / FILENAME} (placer apply --placement takes it)")
