"""The train job on a described cluster: the simulated searches around the learner.

Local search before it (`--warm-start local_search`, `placer.policy.search_warm_start`) and
after it (`--polish`), every placement they simulate counted in --samples; the run's
placement.json is the fastest of the phases', and summary.json says which and what each spent.
"""

from __future__ import annotations

from pathlib import Path

from placer.errors import PlacerError
from placer.policy.budget import LOCAL_SEARCH, PLANS, POLISH, REINFORCE, SampleBudget
from placer.policy.checkpoint import save_summary
from placer.policy.summary_file import RunSummary


def default_warm_start(choice: str | None, samples: int | None, described: bool) -> str:
    """The warm start asked for (`choice`); by default local search on a described cluster with a
    sample count (the baseline the learner must not be slower than, run as its first phase), else
    the best baseline placer."""
    choice = choice or ("local_search" if described and samples else "best_baseline")
    if choice == "local_search" and not (described and samples):
        raise PlacerError("--warm-start local_search spends --samples in the simulator of a described cluster: "
                          "add --cluster and --samples N, or pick another --warm-start")
    return choice


def polish(graph, devices: list[str], costs, caps, pipeline, start, budget: SampleBudget, can_polish: bool,
           seed: int, summary: RunSummary, report=print) -> None:
    """The learned placement polished by local search in the simulator (on `costs`: a training
    step's where the objective is training), with what local search and the learner left of the
    samples (`budget`'s allowance), less what earlier sessions' polishes drew that still counts
    (`_still_counted`); `can_polish` False (an interrupted run, or no placement learned): nothing
    is polished now, and earlier polishes stay counted. placement.json becomes the polished one
    when it is faster (the policy's own stays in greedy_placement.json); the ledger and the
    summary say what it drew and what changed."""
    from placer.placement import Placement
    from placer.placers.local_search import local_search

    earlier, run_dir = start.polish_record or {}, start.run_dir
    learner_samples = budget.drawn.get(REINFORCE, 0)
    left = budget.allowance(POLISH) if can_polish else None
    stale = _still_counted(earlier, learner_samples, left)
    allowed = max(0, left - stale) if left is not None else 0
    # on record at its whole allowance before it starts: a Ctrl-C inside it leaves that counted for --resume
    record = earlier if left is None else {"samples": stale + allowed, "earlier_samples": stale, "budget": allowed,
                                           "learner_samples": learner_samples}
    if not record.get("samples"):
        return
    budget.set_drawn(POLISH, record["samples"])
    start.keep_budget(budget, polish=record)
    summary["polish"] = record
    count_samples(summary, budget)
    save_summary(run_dir, summary)
    if allowed < 1:   # nothing to polish now; what earlier polishes drew stays counted
        return
    learned = Placement.load(run_dir / "placement.json")
    polished = local_search(graph, devices, costs, caps, seed=seed, samples=allowed,
                            start=learned, pipeline=pipeline)
    info = polished.extra["placer"]
    before, after = info["start_step_time"], info["simulated_step_time"]
    record.update(samples=stale + info["simulated"], from_s=before, to_s=after, group_moves=info["group_moves"],
                  node_moves=info["node_moves"], local_optimum=info["local_optimum"])
    budget.set_drawn(POLISH, record["samples"])
    start.keep_budget(budget, polish=record)
    count_samples(summary, budget)
    if after < before:
        polished.extra = {**learned.extra, "source": "policy, polished by local search", "polish": record}
        adopt(summary, run_dir, polished, after, f"{summary['best_source']}, polished by local search")
    save_summary(run_dir, summary)
    report(f"polished the learned placement with local search: {before * 1e3:.3f} -> {after * 1e3:.3f} ms simulated "
           f"in {info['simulated']} simulated placements" +
           (f" (and {stale} in earlier sessions' polishes, still counted)" if stale else ""))


def _still_counted(earlier: dict, learner_samples: int, left: int | None) -> int:
    """The samples earlier sessions' polishes drew that still count now: all of them, unless the
    last one polished the learner's placement as it is now (the learner has not moved since) and
    a polish now may draw as much: local search is deterministic and its budget only cuts it
    short, so the polish now simulates again every placement it did (finished or cut short), and
    they count once, as a resumed run's local search warm start does."""
    if not earlier:
        return 0
    older = earlier.get("earlier_samples", 0)
    if earlier.get("learner_samples") == learner_samples and left is not None and \
            left - older >= earlier["budget"]:
        return older
    return earlier["samples"]


def count_samples(summary: RunSummary, budget: SampleBudget) -> None:
    """The summary's sample counts from the ledger: every phase's (the plans' once they ran), and the
    simulated ones (all but the learner's real samples: the searches around it simulate)."""
    summary["samples"] = budget.spent
    summary["samples_by_reward"]["simulated"] = budget.spent - summary["samples_by_reward"]["real"]
    summary["samples_by_phase"] = budget.by_phase(LOCAL_SEARCH, REINFORCE, POLISH,
                                                  *((PLANS,) if PLANS in budget.drawn else ()))


def adopt(summary: RunSummary, run_dir: Path, placement, step_time: float, source: str) -> None:
    """`placement` becomes the run's (placement.json, the best figures and the speedup)."""
    from placer.measure.intervals import Interval
    from placer.policy.run_summary import speedup_record

    placement.save(run_dir / "placement.json")
    summary["best_step_time"] = step_time
    summary["best_source"] = source
    single = summary.get("single_device_step_times", {}).get(summary.get("best_single_device"))
    if single:
        ratio = single / step_time
        summary["speedup_vs_best_single_device"] = ratio
        summary["vs_best_single_device"] = speedup_record(Interval(ratio, ratio, ratio, 1))


def finish_searched(searched, summary: RunSummary, budget: SampleBudget, per_update: int, policy_best_s: float | None,
                    confirm, run_dir: Path) -> None:
    """After a local search warm start: its samples counted in the run's, the samples of each phase,
    whether REINFORCE improved on local search, and placement.json local search's own where neither
    the policy nor the polish found anything faster (a tie keeps local search's: it came first).
    `policy_best_s`: the policy's best before the polish."""
    count_samples(summary, budget)
    searched_time = confirm.measure(searched.placement)
    searched_s = searched_time.step_time if searched_time.ok else None
    record = searched.record()
    record.update(step_time_s=searched_s, samples_per_update=per_update)
    summary["local_search_warm_start"] = record
    summary["reinforce_improved_on_local_search"] = bool(
        budget.drawn.get(REINFORCE) and policy_best_s is not None and searched_s is not None
        and policy_best_s < searched_s)
    summary["note"] = searched.exhausted_text()
    best = summary["best_step_time"]   # the policy's, or the polished one
    if searched_s is not None and (best is None or searched_s <= best):
        searched.placement.extra = {**searched.placement.extra, "source": "local search (warm start)"}
        adopt(summary, run_dir, searched.placement, searched_s, "local search (warm start)")
    save_summary(run_dir, summary)


def samples_line(summary: RunSummary, searched: int, reinforced: int, total: int | None) -> str:
    """What each phase drew of --samples, in one line."""
    by = summary["samples_by_phase"]
    return (f"samples: {searched} local search + {reinforced} REINFORCE + {by['polish']} polish"
            + (f" + {by['plans']} plans" if by.get("plans") else "") + f" of {total}")


def searched_text(searched, reinforce_samples: int, polishing: bool) -> str:
    """What local search did and what it left the learner, in one line (two when it left nothing)."""
    r = searched.record()
    line = (f"local search (the local_search baseline with --samples {searched.budget} as its budget): "
            f"{r['start']} {r['start_step_time_s'] * 1e3:.3f} -> {r['step_time_s'] * 1e3:.3f} ms simulated in "
            f"{searched.samples} samples, ")
    if searched.exhausted_text():
        return line + "without reaching a local optimum\n" + searched.exhausted_text() + \
            "; the run's placement is local search's"
    return line + (f"at its local optimum; the learner gets the {searched.total - searched.samples} left "
                   f"({reinforce_samples} for REINFORCE{', the rest polishing' if polishing else ''})")
