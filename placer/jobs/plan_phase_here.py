"""The train job's last search on this machine's devices: plans, from the learned placement,
with real rewards at the end.

Once the learner and the polish have settled placement.json, the plans users run that run here
(DDP, Megatron's tensor parallelism where the model has its blocks, the batch cut by speed) are
built, and REINFORCE over plans (`placer.policy.plan_reinforce`) searches from the fastest of them
and the learned placement on the profile's predictions (`ProfiledPlanScorer`: each shard its op's
share of the profiled time). The profile misjudges shards on CPU devices, so the search's plan,
the learned placement and the best-predicted of the other starts are then measured for real side
by side (`placer.evaluate.plan_finalists`), and the fastest measured is the run's plan: plan.json
where it measured faster than the learned placement in those rounds. Every plan predicted and
every one measured counts in --samples (the ledger's `plans` phase); the measured ones count as
real samples. On a training step the search ranks plans by their predicted forward steps (the
profile prices no shard's backward yet) and the finalists' training steps are what is measured,
so the plan kept is the fastest training step measured.
"""

from __future__ import annotations

import time
from pathlib import Path

from placer.jobs.plan_phase import FILENAME, LEARNER
from placer.jobs.searches import count_samples
from placer.policy.budget import PLANS, SampleBudget
from placer.policy.checkpoint import save_summary
from placer.policy.summary_file import RunSummary

# the plans users run that run on this machine's devices (`plan_rows.MEASURED`, the search aside)
USER_PLANS = ("data_parallel", "tensor_parallel", "data_parallel_by_speed")
LEARNED = "learned placement"


def least_samples() -> int:
    """The fewest samples a plan search here runs on: one plan predicted, and the finalists measured."""
    from placer.evaluate.plan_finalists import FINALISTS

    return FINALISTS + 1


def search_plans_here(graph, devices: list[str], cost, measurer, run_dir: Path, summary: RunSummary,
                      budget: SampleBudget, start, seed: int, report=print) -> list:
    """Search plans from placement.json on the profile, measure the finalists for real, and write
    plan.json where one beats the learned placement. Returns the rows for the closing comparison
    (the run's plan, measured again there)."""
    from placer.evaluate import plan_finalists
    from placer.evaluate.compare import CompareRow
    from placer.evaluate.plan_rows import costs_here, measured_plan_rows
    from placer.placement import Placement
    from placer.plans import search
    from placer.plans.plan import Plan
    from placer.plans.scoring import ProfiledPlanScorer
    from placer.policy.plan_reinforce import plan_reinforce

    if measurer.pipeline is not None and measurer.pipeline.pipelined:
        report("plans: not searched; plans are priced on one step, not a pipelined one, so far")
        return []
    allowed = budget.allowance(PLANS)
    if allowed is not None and allowed < least_samples():
        report(f"plans: not searched; --samples leaves {allowed} for plans, and a search here needs "
               f"{least_samples()} (raise --samples, or --space placement)")
        return []
    samples = search.SAMPLES if allowed is None else allowed - plan_finalists.FINALISTS
    began = time.perf_counter()
    cost = costs_here(graph, measurer, cost)   # batch shards timed at their own shapes
    rows, notes = measured_plan_rows(graph, devices, USER_PLANS, measurer, cost)
    learned = Plan.from_placement(Placement.load(run_dir / "placement.json"))
    starts = {LEARNED: learned, **{r.name: r.split_plan for r in rows}}
    scorer = ProfiledPlanScorer(graph, cost, samples)
    found = plan_reinforce(graph, None, starts, devices, samples=samples, seed=seed, scorer=scorer)
    others = {name: plan for name, plan in starts.items() if name != LEARNED}
    ranked = [(plan_finalists.found_name(found), found.plan), (LEARNED, learned),
              *plan_finalists.by_prediction(others, scorer.time)]
    finalists = plan_finalists.runnable_finalists(graph, ranked, measurer)
    report(f"plans: {scorer.simulated} predicted from the profile; measuring the {len(finalists)} fastest predicted "
           f"side by side ({', '.join(finalists)}) ...")
    measured = plan_finalists.measure_finalists(finalists, measurer)
    kept = plan_finalists.fastest_measured(finalists, measured)
    placement_s = measured.get(LEARNED)
    plan_s = measured.get(kept)
    faster = kept != LEARNED and plan_s is not None and (placement_s is None or plan_s < placement_s)
    plan = finalists[kept]
    budget.set_drawn(PLANS, scorer.simulated + len(measured))
    start.keep_budget(budget)
    summary["samples_by_reward"]["real"] += len(measured)
    split = sum(1 for op in plan.ops.values() if not op.whole)
    record = {"step_time": plan_s, "placement_step_time": placement_s, "measured": True,
              "vs_placement": placement_s / plan_s if faster and placement_s else None, "start": found.start,
              "kept": kept, "finalists": {name: measured.get(name) for name in finalists},
              "split_ops": split, "ops": len(plan.ops), "samples": scorer.simulated + len(measured),
              "predicted": scorer.simulated, "file": FILENAME if faster else None, "notes": notes}
    if faster:
        plan.save(run_dir / FILENAME)
    elif (run_dir / FILENAME).exists():   # an earlier session's plan that no longer beats placement.json
        (run_dir / FILENAME).unlink()
    summary["plan"] = record
    count_samples(summary, budget)
    save_summary(run_dir, summary)
    report(plan_line_here(record, run_dir))
    note = (f"the run's plan: REINFORCE over plans from {found.start}, {scorer.simulated} plans predicted from the "
            f"profile, {len(measured)} measured; {kept} measured fastest, {split} of {len(plan.ops)} ops split")
    return [CompareRow("learned_plan", LEARNER, True, time.perf_counter() - began, note=note, plan=True,
                       split_plan=plan, opener=lambda: measurer.open(plan), run_record=measurer.run_record(),
                       predicted_step_time=scorer.time(plan))] if faster else []


def plan_line_here(record: dict, run_dir: Path) -> str:
    """What the plan search here found, in one line."""
    if record["step_time"] is None:
        return "plans: none of the plans measured ran; placement.json stays the run's"
    if record["file"] is None:
        return (f"plans: none measured faster than the learned placement ({record['predicted']} plans predicted, "
                f"{len(record['finalists'])} measured); placement.json stays the run's")
    return (f"plan: {record['kept']}, {record['step_time'] * 1e3:.2f} ms measured, {record['vs_placement']:.2f}x "
            f"the learned placement in the same rounds ({record['split_ops']} of {record['ops']} ops split): "
            f"{run_dir / FILENAME} (placer apply --placement takes it)")
