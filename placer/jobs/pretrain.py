"""The pretrain job: train the graph policy across the corpus on the simulator.

`pretrain(PretrainSettings(updates=100))` is what `placer pretrain` runs: the corpus's training
items are built, the learner (`placer.policy.gnn.pretrain`, its hyperparameters `PretrainConfig`)
trains in the run folder, locked while the job writes there, and places each held-out item
zero-shot at the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from placer.errors import PlacerError
from placer.jobs.paths import run_folder as run_folder_of
from placer.jobs.settings import check_seed
from placer.policy.gnn.pretrain import CHECKPOINT, PretrainConfig, PretrainResult


@dataclass(frozen=True)
class PretrainSettings:
    """A pre-training run: the learner's `config`, how long (`budget_s` seconds or `updates` in all,
    a resumed run counting those before), the `corpus` ("small" or "full"), the `run_dir` (None:
    runs/pretrain-<date>-<time>) and whether to `resume` it, Ray `workers` (0: in this process) at
    `ray_address` (None: a local Ray), and the `command` line recorded beside the policy. Refused
    in one line on construction where it cannot run."""

    config: PretrainConfig = field(default_factory=PretrainConfig)
    budget_s: float | None = None
    updates: int | None = None
    corpus: str = "full"
    run_dir: Path | None = None
    resume: bool = False
    workers: int = 0
    ray_address: str | None = None
    command: str | None = None
    start_from: Path | None = None   # a policy file whose weights the run starts from (None: a fresh network)

    def __post_init__(self) -> None:
        check_seed(self.config.seed)
        c = self.config
        for option, value in (("items-per-update", c.items_per_update), ("samples", c.learn.samples),
                              ("hidden", c.policy.hidden), ("layers", c.policy.layers), ("rounds", c.policy.rounds)):
            if value < 1:
                raise PlacerError(f"--{option} must be at least 1")
        if self.workers < 0:
            raise PlacerError("--workers must be 0 (in this process) or more")
        if self.updates is not None and self.updates < 1:
            raise PlacerError("--updates must be at least 1")
        if self.budget_s is None and self.updates is None:
            raise PlacerError("give a --budget (like 10m) or --updates N")
        if self.run_dir is None and self.resume:
            raise PlacerError("--resume needs the --run-dir of the run to continue")


@dataclass(frozen=True)
class PretrainRun:
    """The run folder (policy.pt, checkpoint.pt, summary.json, curves) and what the learner did:
    its updates, samples, seconds and each held-out item's figures."""

    run_dir: Path
    result: PretrainResult


def start_policy(name: str | None, shape):
    """The policy file `name` names ('pretrained': the shipped one) and its network's shape, which the
    run takes; (None, `shape`) without one."""
    if name is None:
        return None, shape
    from placer.policy.gnn.checkpoint import PRETRAINED, load_policy

    path = PRETRAINED if name == "pretrained" else Path(name)
    return path, load_policy(path)[0].config


def run_folder(settings: PretrainSettings) -> Path:
    """The run folder, refused in one line before any work when it cannot be what is asked: a new
    run into a folder holding one, or a resume where there is none."""
    return run_folder_of(settings.run_dir, settings.resume, "pretrain", lambda d: (d / CHECKPOINT).exists(),
                         f"{{run_dir}} holds no {CHECKPOINT} to resume; drop --resume to start a run there")


def pretrain(settings: PretrainSettings, log: Callable[[str], None] = print) -> PretrainRun:
    """Build the corpus and pre-train in the locked run folder; `log` gets the corpus's line and the
    learner's progress."""
    from placer.corpus import held_out_items, training_items
    from placer.policy.gnn.pretrain import pretrain as learn
    from placer.policy.run_lock import hold_run_folder

    run_dir = run_folder(settings)
    with hold_run_folder(run_dir, "placer pretrain"):
        started = time.monotonic()
        seed = settings.config.seed
        items = list(training_items(seed, settings.corpus))
        # the full corpus is judged on the large held-out graphs too (deep Transformers, Llama-2-7B)
        held_out = held_out_items(seed, settings.corpus) + (held_out_items(seed, "large")
                                                            if settings.corpus == "full" else [])
        log(f"corpus ({settings.corpus}): {len(items)} training items, {len(held_out)} held out, built in "
            f"{time.monotonic() - started:.0f} s; run folder {run_dir}")
        rollouts = None
        if settings.workers:
            from placer.policy.gnn.rollouts import RayRollouts

            rollouts = RayRollouts(settings.workers, settings.ray_address)
        result = learn(run_dir, items, held_out, settings.config, budget_s=settings.budget_s, updates=settings.updates,
                       resume=settings.resume, rollouts=rollouts,
                       run_info={"corpus": settings.corpus, "command": settings.command,
                                 **({"started_from": str(settings.start_from)} if settings.start_from else {})},
                       start_from=settings.start_from, log=log)
    return PretrainRun(run_dir, result)


def held_out_lines(result: PretrainResult) -> list[str]:
    """What `placer pretrain` prints of the held-out items: each one's ratios, then their mean and worst."""
    lines = ["held out, placed zero-shot: simulated step time over the best list heuristic's, over the best "
             "baseline's (local search included), and from nothing alone over the heuristic's"]
    for row in result.held_out:
        if "failure" in row:
            lines.append(f"  {row['name']:<58} not placed: {row['failure']}")
        elif row["ratio_to_best_heuristic"] is None:
            lines.append(f"  {row['name']:<58} no heuristic fits")
        else:
            lines.append(f"  {row['name']:<58} {row['ratio_to_best_heuristic']:6.3f}x "
                         f"{row['ratio_to_best_baseline']:6.3f}x {_times(row['from_nothing_ratio_to_best_heuristic'])}  "
                         f"({row['seconds_to_place']:.2f} s)")
    s = result.summary
    if s["held_out_mean_ratio"] is not None:
        unfit = s.get("held_out_from_nothing_unfit")
        lines.append(f"mean {s['held_out_mean_ratio']:.3f}x / {s['held_out_mean_ratio_to_best_baseline']:.3f}x / "
                     f"{_times(s['held_out_from_nothing_mean_ratio'])}, worst {s['held_out_worst_ratio']:.3f}x / "
                     f"{s['held_out_worst_ratio_to_best_baseline']:.3f}x / {_times(s['held_out_from_nothing_worst_ratio'])}"
                     + (f" (from nothing: {unfit} placed item(s) fitted no round, left out)" if unfit else ""))
    return lines


def _times(ratio: float | None) -> str:
    """A ratio as the held-out lines print it; 'no fit' where its chain fitted no round."""
    return "no fit" if ratio is None else f"{ratio:6.3f}x"
