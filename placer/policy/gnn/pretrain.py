"""Pre-training the graph policy across a corpus of graphs and clusters, on the simulator.

Each update draws `items_per_update` training items, samples `LearnConfig.samples` placements of
each (here or on Ray workers: `rollouts.py`) and takes one REINFORCE step (`learn.update`). The run
folder gets TensorBoard curves (`charts/...`), `checkpoint.pt` (weights, optimizer, counters and
random states: `resume` continues exactly where it stopped, at a checkpoint) every
`checkpoint_every` updates and at the end, `policy.pt` (the weights alone, as shipped) and
`summary.json` with the held-out figures: each held-out item placed zero-shot (greedy), its
simulated step time over the best list heuristic's and over the best baseline's (local search at
its defaults included; the exact solver is left to benchmarks/generalisation.py), and the
seconds it took.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from placer.errors import PlacerError
from placer.policy.checkpoint import save_json
from placer.policy.gnn.checkpoint import load_checkpoint, load_policy, save_policy
from placer.policy.gnn.episode import Episode, make_episode
from placer.policy.gnn.learn import LearnConfig, update
from placer.policy.gnn.model import GraphPlacementPolicy, PolicyConfig
from placer.policy.gnn.placing import place_episode

CHECKPOINT = "checkpoint.pt"


@dataclass(frozen=True)
class PretrainConfig:
    """What a pre-training run does; its identity (resume refuses another)."""

    items_per_update: int = 8
    seed: int = 0
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    learn: LearnConfig = field(default_factory=LearnConfig)
    checkpoint_every: int = 20

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PretrainResult:
    updates: int
    samples: int
    seconds: float
    held_out: list[dict[str, Any]]
    summary: dict[str, Any]


def held_out_figures(policy: GraphPlacementPolicy, items: list[Any]) -> list[dict[str, Any]]:
    """Each held-out item placed zero-shot (greedy): seconds to place (the heuristics it starts
    from included), simulated step time, the best list heuristic's, and their ratio; the same for
    the chain from nothing alone. An item where no round of the policy fits the devices' memory is
    a row with its failure and no figures, not the end of the run."""
    rows = []
    for item in items:
        started = time.monotonic()
        episode = make_episode(item.graph, item.cluster, name=item.name)
        try:
            placement = place_episode(policy, episode)
        except PlacerError as exc:
            rows.append(_failure_row(item, str(exc)))
            continue
        seconds = time.monotonic() - started
        info = placement.extra["placer"]
        # the policy's own figure: where `place` kept the heuristic's placement instead, it says so apart
        t = info.get("policy_step_time", info["simulated_step_time"])
        if t is None:   # the heuristic's placement was kept because every round of the policy overflowed
            rows.append(_failure_row(item, f"no placement the policy made fits: {info['chain']}"))
            continue
        best = episode.best_time if episode.best_name else None
        searched = _local_search_time(episode)
        yardsticks = [b for b in (best, searched) if b]
        rows.append({"name": item.name, "family": getattr(item, "family", ""), "cluster": item.cluster.name,
                     "ops": len(item.graph.nodes), "groups": episode.features.n_groups,
                     "devices": len(item.cluster.devices), "seconds_to_place": round(seconds, 3),
                     "policy_step_time_s": t, "placed_step_time_s": info["simulated_step_time"],
                     "kept": info["chain"] + (f", round {info['round']}" if "round" in info else ""),
                     "from_nothing_step_time_s": info["from_nothing_step_time"],
                     "best_heuristic": episode.best_name, "best_heuristic_step_time_s": best,
                     "ratio_to_best_heuristic": t / best if best else None,
                     "from_nothing_ratio_to_best_heuristic": _ratio(info["from_nothing_step_time"], best),
                     "local_search_step_time_s": searched,
                     "ratio_to_best_baseline": t / min(yardsticks) if yardsticks else None})
    return rows


def _failure_row(item: Any, failure: str) -> dict[str, Any]:
    """A held-out item no round of the policy fits: its failure, and no figures."""
    return {"name": item.name, "family": getattr(item, "family", ""), "cluster": item.cluster.name,
            "ops": len(item.graph.nodes), "failure": failure, "ratio_to_best_heuristic": None,
            "ratio_to_best_baseline": None, "from_nothing_ratio_to_best_heuristic": None}


def _ratio(t: float | None, best: float | None) -> float | None:
    """`t` over `best`; None where `t` is None (no round fits: JSON has no infinity) or without a `best`."""
    return t / best if best and t is not None else None


def _local_search_time(episode: Episode) -> float | None:
    """Local search's simulated step time at its defaults (from the best list heuristic or the exact
    solver's placement, 2000 simulated placements), None when it finds no placement that fits."""
    from placer.placers.local_search import local_search

    try:
        found = local_search(episode.graph, episode.cluster.device_names, episode.cost, episode.caps)
    except PlacerError:
        return None
    return float(found.extra["placer"]["simulated_step_time"])


def pretrain(run_dir: Path, items: list[Any], held_out: list[Any], config: PretrainConfig, *,
             budget_s: float | None = None, updates: int | None = None, resume: bool = False, rollouts=None,
             run_info: dict[str, Any] | None = None, start_from: Path | None = None,
             log: Callable[[str], None] = print) -> PretrainResult:
    """Train across `items` (each with .name, .graph, .cluster) until `budget_s` seconds or `updates`
    updates in all (a resumed run counts the ones before), then place `held_out` zero-shot; a new
    run starts from the weights in `start_from` where given (their shape must be `config.policy`)."""
    from torch.utils.tensorboard import SummaryWriter

    from placer.policy.gnn.rollouts import LocalRollouts

    if not items:
        raise PlacerError("the corpus gave no training items; nothing to pre-train on")
    if budget_s is None and updates is None:
        raise PlacerError("give pre-training a budget (--budget) or a number of updates (--updates)")
    run_dir = Path(run_dir)
    rollouts = rollouts or LocalRollouts()
    torch.manual_seed(config.seed)
    policy = GraphPlacementPolicy(config.policy)
    if start_from is not None and not resume:
        policy, _ = load_policy(start_from)
        if policy.config != config.policy:
            raise PlacerError(f"{start_from} holds a policy of another shape ({policy.config}); leave out --hidden, "
                              "--layers and --rounds to take its own")
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learn.lr)
    rng = np.random.default_rng(config.seed)
    done, samples, spent = 0, 0, 0.0
    if resume:
        policy, info, extra = load_checkpoint(run_dir / CHECKPOINT)
        if info.get("config") != config.to_dict():
            raise PlacerError(f"{run_dir} was pre-trained with other settings ({info.get('config')}); resume it with "
                              "the same options, or start another --run-dir")
        optimizer = torch.optim.Adam(policy.parameters(), lr=config.learn.lr)
        optimizer.load_state_dict(extra["optimizer"])
        rng.bit_generator.state = extra["rng"]
        done, samples, spent = extra["updates"], extra["samples"], extra["seconds"]
        log(f"resumed {run_dir} at update {done} ({samples} samples, {spent:.0f} s)")
    writer = SummaryWriter(str(run_dir))
    episodes: dict[int, Episode] = {}
    info = {"config": config.to_dict(), **(run_info or {})}

    def checkpoint() -> None:
        save_policy(policy, run_dir / CHECKPOINT, info,
                    extra={"optimizer": optimizer.state_dict(), "rng": rng.bit_generator.state, "updates": done,
                           "samples": samples, "seconds": spent})

    started = time.monotonic() - spent
    try:
        while (updates is None or done < updates) and (budget_s is None or time.monotonic() - started < budget_s):
            chosen = rng.choice(len(items), size=min(config.items_per_update, len(items)), replace=False)
            for i in chosen:
                if int(i) not in episodes:
                    episodes[int(i)] = make_episode(items[i].graph, items[i].cluster, name=items[i].name)
            batch = [episodes[int(i)] for i in chosen]
            results = rollouts.run(policy, [items[i] for i in chosen], batch, config.learn, config.seed + done)
            stats = update(policy, optimizer, batch, results, config.learn)
            done += 1
            samples += sum(r.actions.shape[0] * r.actions.shape[1] for r in results)
            spent = time.monotonic() - started
            for name, value in stats.items():
                writer.add_scalar(("losses/" if name in ("loss", "grad_norm") else "charts/") + name, value, samples)
            writer.add_scalar("charts/samples_per_second", samples / max(spent, 1e-9), samples)
            if done % config.checkpoint_every == 0:
                checkpoint()
                log(f"update {done}: {samples} samples, {spent:.0f} s, mean cost {stats['cost_mean']:.3f} "
                    f"(last round {stats['cost_last_round']:.3f}) of the best heuristic's step time, entropy "
                    f"{stats['entropy_per_group']:.3f} nats per group")
    finally:
        spent = time.monotonic() - started
        checkpoint()
        rollouts.close()
    save_policy(policy, run_dir / "policy.pt", info)
    rows = held_out_figures(policy, held_out)
    for row in rows:
        writer.add_scalar(f"held_out/{row['name']}", row["ratio_to_best_heuristic"] or float("nan"), samples)
    writer.close()
    ratios = [r["ratio_to_best_heuristic"] for r in rows if r["ratio_to_best_heuristic"] is not None]
    to_baseline = [r["ratio_to_best_baseline"] for r in rows if r["ratio_to_best_baseline"] is not None]
    placed = [r for r in rows if r["ratio_to_best_heuristic"] is not None]
    alone = [r["from_nothing_ratio_to_best_heuristic"] for r in placed if r["from_nothing_ratio_to_best_heuristic"] is not None]
    summary = {**info, "updates": done, "samples": samples, "seconds": round(spent, 1), "training_items": len(items),
               "episodes_seen": len(episodes), "held_out": rows,
               "held_out_mean_ratio": float(np.mean(ratios)) if ratios else None,
               "held_out_worst_ratio": float(np.max(ratios)) if ratios else None,
               "held_out_from_nothing_mean_ratio": float(np.mean(alone)) if alone else None,
               "held_out_from_nothing_worst_ratio": float(np.max(alone)) if alone else None,
               # placed items whose chain from nothing fitted no round: left out of its mean and worst
               "held_out_from_nothing_unfit": len(placed) - len(alone),
               "held_out_mean_ratio_to_best_baseline": float(np.mean(to_baseline)) if to_baseline else None,
               "held_out_worst_ratio_to_best_baseline": float(np.max(to_baseline)) if to_baseline else None}
    save_json(Path(run_dir) / "summary.json", summary)
    return PretrainResult(done, samples, spent, rows, summary)
