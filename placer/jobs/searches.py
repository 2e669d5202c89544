"""The train job on a described cluster: the simulated searches around the learner.

Local search before it (`--warm-start local_search`, `placer.policy.search_warm_start`) and
after it (`--polish`), every placement they simulate counted in --samples; the run's
placement.json is the fastest of the phases', and summary.json says which and what each spent.
"""

from __future__ import annotations

import json
from pathlib import Path

from placer.errors import PlacerError
from placer.policy.checkpoint import save_summary


def default_warm_start(choice: str | None, samples: int | None, described: bool) -> str:
    """The warm start asked for (`choice`); by default local search on a described cluster with a
    sample count (the baseline the learner must not be slower than, run as its first phase), else
    the best baseline placer."""
    choice = choice or ("local_search" if described and samples else "best_baseline")
    if choice == "local_search" and not (described and samples):
        raise PlacerError("--warm-start local_search spends --samples in the simulator of a described cluster: "
                          "add --cluster and --samples N, or pick another --warm-start")
    return choice


def earlier_polish(run_dir: Path, resume: bool) -> dict:
    """On --resume, the polish record of the run's summary (an earlier session's polish, finished or
    cut short: it is on record before it starts), read before training rewrites the summary; else nothing."""
    summary = run_dir / "summary.json"
    return (json.loads(summary.read_text()).get("polish") or {}) if resume and summary.is_file() else {}


def polish(graph, devices: list[str], costs, caps, pipeline, run_dir: Path, left: int | None, seed: int,
           summary: dict, learner_samples: int, earlier: dict, report=print) -> None:
    """The learned placement (the learner's at `learner_samples`) polished by local search in the
    simulator (on `costs`: a training step's where the objective is training), with the `left`
    samples local search and the learner left, less what earlier sessions' polishes spent (`earlier`,
    their record; None: nothing to polish now, an interrupted run or no placement learned, and only
    their samples are counted): placement.json becomes the polished one when it is faster (the
    policy's own stays in greedy_placement.json), and the summary counts the samples and says what changed."""
    from placer.placement import Placement
    from placer.placers.local_search import local_search

    stale = _still_counted(earlier, learner_samples, left)
    budget = max(0, left - stale) if left is not None else 0
    # on record at its whole budget before it starts: a Ctrl-C inside it leaves that counted for --resume
    record = earlier if left is None else {"samples": stale + budget, "earlier_samples": stale, "budget": budget,
                                           "learner_samples": learner_samples}
    if not record.get("samples"):
        return
    summary["polish"] = record
    _count(summary, record["samples"])
    save_summary(run_dir, summary)
    if budget < 1:   # nothing to polish now; what earlier polishes spent stays counted
        return
    learned = Placement.load(run_dir / "placement.json")
    polished = local_search(graph, devices, costs, caps, seed=seed, samples=budget,
                            start=learned, pipeline=pipeline)
    info = polished.extra["placer"]
    before, after = info["start_step_time"], info["simulated_step_time"]
    _count(summary, info["simulated"] - budget)
    record.update(samples=stale + info["simulated"], from_s=before, to_s=after, group_moves=info["group_moves"],
                  node_moves=info["node_moves"], local_optimum=info["local_optimum"])
    if after < before:
        polished.extra = {**learned.extra, "source": "policy, polished by local search", "polish": record}
        adopt(summary, run_dir, polished, after, f"{summary['best_source']}, polished by local search")
    save_summary(run_dir, summary)
    report(f"polished the learned placement with local search: {before * 1e3:.3f} -> {after * 1e3:.3f} ms simulated "
          f"in {info['simulated']} simulated placements" +
          (f" (and {stale} in earlier sessions' polishes, still counted)" if stale else ""))


def _still_counted(earlier: dict, learner_samples: int, left: int | None) -> int:
    """The samples earlier sessions' polishes spent that still count now: all of them, unless the
    last one polished the learner's placement as it is now (the learner has not moved since) and
    a polish now may spend as much: local search is deterministic and its budget only cuts it
    short, so the polish now simulates again every placement it did (finished or cut short), and
    they count once, as a resumed run's local search warm start does."""
    if not earlier:
        return 0
    older = earlier.get("earlier_samples", 0)
    if earlier.get("learner_samples") == learner_samples and left is not None and \
            left - older >= earlier["budget"]:
        return older
    return earlier["samples"]


def _count(summary: dict, samples: int) -> None:
    summary["samples"] += samples
    summary["samples_by_reward"]["simulated"] += samples


def adopt(summary: dict, run_dir: Path, placement, step_time: float, source: str) -> None:
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


def finish_searched(searched, summary: dict, reinforce_samples: int, per_update: int, policy_best_s: float | None,
                    confirm, run_dir: Path) -> None:
    """After a local search warm start: its samples counted in the run's, the samples of each phase,
    whether REINFORCE improved on local search, and placement.json local search's own where neither
    the policy nor the polish found anything faster (a tie keeps local search's: it came first).
    `policy_best_s`: the policy's best before the polish."""
    polished = summary.get("polish", {}).get("samples", 0)
    summary["samples"] += searched.samples
    summary["samples_by_reward"]["simulated"] += searched.samples
    summary["samples_by_phase"] = {"local_search": searched.samples, "reinforce": reinforce_samples,
                                   "polish": polished}
    searched_time = confirm.measure(searched.placement)
    searched_s = searched_time.step_time if searched_time.ok else None
    record = searched.record()
    record.update(step_time_s=searched_s, samples_per_update=per_update)
    summary["local_search_warm_start"] = record
    summary["reinforce_improved_on_local_search"] = bool(
        reinforce_samples and policy_best_s is not None and searched_s is not None and policy_best_s < searched_s)
    summary["note"] = searched.exhausted_text()
    best = summary["best_step_time"]   # the policy's, or the polished one
    if searched_s is not None and (best is None or searched_s <= best):
        searched.placement.extra = {**searched.placement.extra, "source": "local search (warm start)"}
        adopt(summary, run_dir, searched.placement, searched_s, "local search (warm start)")
    save_summary(run_dir, summary)


def searched_text(searched, reinforce_samples: int, polishing: bool) -> str:
    """What local search did and what it left the learner, in one line (two when it left nothing)."""
    r = searched.record()
    line = (f"local search (the local_search baseline with --samples {searched.budget} as its budget): "
            f"{r['start']} {r['start_step_time_s'] * 1e3:.3f} -> {r['step_time_s'] * 1e3:.3f} ms simulated in "
            f"{searched.samples} samples, ")
    if searched.exhausted_text():
        return line + "without reaching a local optimum\n" + searched.exhausted_text() + \
            "; the run's placement is local search's"
    return line + (f"at its local optimum; the learner gets the {searched.left} left "
                   f"({reinforce_samples} for REINFORCE{', the rest polishing' if polishing else ''})")
