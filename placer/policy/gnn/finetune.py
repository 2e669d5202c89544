"""Fine-tuning the graph policy on one graph and cluster (`placer train --policy pretrained`).

The same REINFORCE step as pre-training (`learn.update`) on one episode, with simulated rewards,
until a number of sampled placements or a time budget is spent. The run folder gets TensorBoard
curves, `policy.pt` (the fine-tuned weights), `placement.json` (the fastest placement seen: the
zero-shot one, or a sampled one) and `summary.json`, whose `curve` says after how many samples the
best placement reached each figure, the yardstick against a per-graph learner's.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from placer.policy.gnn.checkpoint import save_policy
from placer.policy.gnn.episode import Episode
from placer.policy.gnn.learn import LearnConfig, rollout, update, yardstick
from placer.policy.gnn.placing import place_episode


@dataclass
class FinetuneResult:
    samples: int
    zero_shot_step_time: float
    best_step_time: float
    greedy_step_time: float
    summary: dict[str, Any]


def finetune(policy, episode: Episode, run_dir: Path, config: LearnConfig, *, samples: int | None = None,
             budget_s: float | None = None, seed: int = 0, run_info: dict[str, Any] | None = None,
             log: Callable[[str], None] = print) -> FinetuneResult:
    """Fine-tune `policy` on `episode` for `samples` sampled placements or `budget_s` seconds."""
    from torch.utils.tensorboard import SummaryWriter

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    writer = SummaryWriter(str(run_dir))
    zero_shot = place_episode(policy, episode, keep_heuristic=False)   # the policy's own
    best_time = zero_shot.extra["placer"]["simulated_step_time"]
    best, best_source = zero_shot, "zero-shot"
    scale = yardstick(episode, np.asarray([best_time]))
    curve = [{"samples": 0, "best_step_time": best_time}]
    done, started = 0, time.monotonic()
    while (samples is None or done < samples) and (budget_s is None or time.monotonic() - started < budget_s):
        r = rollout(policy, episode, config, generator)
        stats = update(policy, optimizer, [episode], [r], config)
        done += r.actions.shape[0] * r.actions.shape[1]
        k, j = np.unravel_index(np.argmin(r.costs), r.costs.shape)
        if r.costs[k, j] * scale < best_time * (1 - 1e-12) and r.costs[k, j] < config.failure_ratio:
            best_time = float(r.costs[k, j] * scale)
            best, best_source = episode.placement(r.actions[k, j], simulated_step_time=best_time), "sampled"
            curve.append({"samples": done, "best_step_time": best_time})
        for name, value in stats.items():
            writer.add_scalar("charts/" + name, value, done)
        writer.add_scalar("charts/best_step_time", best_time, done)
    greedy = place_episode(policy, episode, keep_heuristic=False)
    greedy_time = greedy.extra["placer"]["simulated_step_time"]
    if greedy_time < best_time:
        best, best_time, best_source = greedy, greedy_time, "greedy"
        curve.append({"samples": done, "best_step_time": best_time})
    writer.close()
    best.extra["placer"]["source"] = f"graph policy, fine-tuned ({best_source})"
    best.save(run_dir / "placement.json")
    save_policy(policy, run_dir / "policy.pt", {**(run_info or {}), "fine_tuned_on": episode.name})
    summary = {**(run_info or {}), "samples": done, "seconds": round(time.monotonic() - started, 1),
               "zero_shot_step_time": zero_shot.extra["placer"]["simulated_step_time"],
               "greedy_step_time": greedy_time, "best_step_time": best_time, "best_source": best_source,
               "best_heuristic": episode.best_name,
               "best_heuristic_step_time": episode.best_time if math.isfinite(episode.best_time) else None,
               "curve": curve}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return FinetuneResult(done, summary["zero_shot_step_time"], best_time, greedy_time, summary)
