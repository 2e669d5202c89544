"""Fine-tuning the graph policy on one graph and cluster (`placer train --policy pretrained`).

The same REINFORCE step as pre-training (`learn.update`) on one episode, until a number of sampled
placements or a time budget is spent; with simulated rewards and a sample count, the last share of
the samples (`placer.policy.budget.GRAPH_POLICY_POLISH`) then polishes the best placement with local search's moves
(`polish_best`), and every simulated placement counts in the samples. Step times are simulated
on the cluster's description, or measured on its devices when the cluster is this machine
(`rewards.py`). The run folder gets
TensorBoard curves, `checkpoint.pt` (weights, optimizer, random states and where the run stands:
every `CHECKPOINT_INTERVAL_S` seconds, at the end and on Ctrl-C, so that `resume` continues to the
result an uninterrupted run reaches), `policy.pt` (the fine-tuned weights), `placement.json` (the
fastest placement seen: the zero-shot one, the best list heuristic's where it is faster, a sampled
one, the polished one or the policy's greedy one at the end)
and `summary.json`, whose `curve` says after how many samples the best placement reached each
figure, the yardstick against a per-graph learner's. With measured rewards the run ends with its
closing rounds (`closing.py`): its placements measured again side by side, the fastest of them
written; Ctrl-C there leaves the checkpoint as training left it, so `resume` measures them again.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from placer.errors import PlacerError
from placer.placement import Placement
from placer.policy.budget import FINE_TUNE, GREEDY_END, POLISH, ZERO_SHOT, SampleBudget
from placer.policy.checkpoint import load_checkpoint, save_checkpoint, save_summary
from placer.policy.summary_file import RunSummary
from placer.policy.gnn.checkpoint import save_policy
from placer.policy.gnn.closing import closing_figures, closing_placements, fastest_placement, measure_closing
from placer.policy.gnn.episode import Episode
from placer.policy.gnn.learn import LearnConfig, relative_costs, rollout, update
from placer.policy.gnn.placing import greedy_chains, place_episode
from placer.policy.gnn.rewards import SimulatedRewards
from placer.policy.phases import REAL, SIMULATED
from placer.interrupts import deferred_interrupt
from placer.policy.session import CHECKPOINT_INTERVAL_S

LEARNER = "graph policy"   # in the checkpoint: a seq2seq run's is not resumed here, nor this one there


@dataclass
class FinetuneState:
    """Where a fine-tune stands, as plain data: what the checkpoint keeps besides tensors."""

    zero_shot_step_time: float
    heuristic_step_time: float   # the best list heuristic's placement, priced as the samples (inf: it fails)
    scale: float                 # what step times are divided by: the heuristic's, else the zero-shot one's
    best: dict[str, Any]         # the fastest placement so far (`Placement.to_dict`)
    best_step_time: float
    best_source: str = "zero-shot"
    samples: int = 0
    seconds: float = 0.0
    curve: list[dict[str, Any]] = field(default_factory=list)
    zero_shot: dict[str, Any] | None = None   # the policy's zero-shot placement, measured again at the end
    # the sample ledger (`SampleBudget.to_dict`): what each phase drew, and the polish's share
    budget: dict[str, Any] = field(default_factory=dict)
    polish: dict[str, Any] | None = None   # what the polish did, once it has run

    def consider(self, placement: Placement, step_time: float, source: str) -> None:
        """Keep `placement` if it is faster than the best so far."""
        if step_time < self.best_step_time * (1 - 1e-12):
            self.best, self.best_step_time, self.best_source = placement.to_dict(), float(step_time), source
            self.curve.append({"samples": self.samples, "best_step_time": self.best_step_time})


@dataclass
class FinetuneResult:
    samples: int
    zero_shot_step_time: float
    best_step_time: float
    greedy_step_time: float
    summary: RunSummary
    interrupted: bool = False


def start_chains(samples: int | None, rounds: int, reward: str, most: int) -> int:
    """The chains sampled for a simulated fine-tune's zero-shot start: as many as `placer place`
    samples (`most`), at most half of `samples` (every round of every chain counts); none with
    measured rewards, whose start is chosen in the simulator and measured once."""
    if reward == REAL:
        return 0
    if samples is None:
        return most
    return int(min(most, max(0, samples // (2 * max(1, rounds)) - 2)))


def finetune(policy, episode: Episode, run_dir: Path, config: LearnConfig, *, rewards=None,
             samples: int | None = None, budget_s: float | None = None, seed: int = 0, resume: bool = False,
             identity: dict[str, Any] | None = None, run_info: dict[str, Any] | None = None,
             chains: int = 0, polish: float = 0.0, log: Callable[[str], None] = print) -> FinetuneResult:
    """Fine-tune `policy` on `episode` for `samples` sampled placements or `budget_s` seconds in all
    (a resumed run counts the ones before), scored by `rewards` (default `SimulatedRewards`).
    `identity` (the graph, cluster, policy file) is what `resume` must find in the checkpoint.
    `chains`: the chains sampled for the zero-shot start beside the most likely ones (`start_chains`);
    with any, every placement the start simulated counts in `samples`. `polish`: the share of the
    samples the start leaves that polishes the best placement at the end (`polish_best`: local
    search's moves on the policy's groups, then single ops, in the simulator); simulated rewards
    and a sample count only."""
    from torch.utils.tensorboard import SummaryWriter

    rewards = rewards or SimulatedRewards(episode)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    identity = {"learner": LEARNER, **(identity or {}), "reward": rewards.reward, "seed": seed,
                "learning": config.to_dict()}
    # the simulated rounds of the policy's greedy chains at the end count too: set aside before learning
    greedy_cost = _greedy_cost(policy, episode, rewards)
    if samples is not None and samples < greedy_cost:
        raise PlacerError(f"--samples {samples} is fewer than the {greedy_cost} placements the policy's greedy "
                          "chains at the end simulate: give more --samples")
    if polish and (rewards.reward == REAL or samples is None):
        raise PlacerError("the fine-tune's polish moves in the simulator within a sample count: it needs "
                          "simulated rewards and --samples; drop --polish")
    if resume:
        state = _resume(run_dir, identity, policy, optimizer, generator, rewards, episode.graph)
        log(f"resumed {run_dir} at {state.samples} samples")
    else:
        state = _start(policy, episode, rewards, chains)
    # the ledger for this session's --samples (a resume may give more); the polish's share is the run's
    budget = SampleBudget.resumed(state.budget, samples, state.budget.get("polish", polish))
    budget.reserve(GREEDY_END, greedy_cost)
    if budget.polish and samples is None:   # a resumed polishing run given a time budget alone
        raise PlacerError("this fine-tune polishes within a sample count: resume it with --samples N")
    end = samples - greedy_cost if samples is not None else None   # where the polish ends

    def draw(phase: str, n: int) -> None:
        budget.draw(phase, n)
        state.samples, state.budget = budget.spent, budget.to_dict()

    draw(FINE_TUNE, 0)
    writer = SummaryWriter(str(run_dir), purge_step=state.samples if resume else None)

    def checkpoint() -> None:
        save_checkpoint(run_dir, {**identity, "weights": policy.state_dict(), "optimizer": optimizer.state_dict(),
                                  "rng": {"sampler": generator.get_state(), "torch": torch.get_rng_state()},
                                  "state": asdict(state), "rewards": rewards.state()})

    def costs(actions: np.ndarray) -> np.ndarray:
        K, R, G = actions.shape
        return relative_costs(rewards.step_times(actions.reshape(K * R, G)).reshape(K, R), state.scale,
                              config.failure_ratio)

    started = saved = time.monotonic()
    started -= state.seconds
    interrupted = False
    try:
        # REINFORCE's share ends where the polish's begins (worked out again on resume, from this --samples)
        while (samples is None or budget.remaining(FINE_TUNE) > 0) and \
                (budget_s is None or time.monotonic() - started < budget_s):
            batch = config if samples is None else _last_batch(config, budget.remaining(FINE_TUNE),
                                                               policy.config.rounds)
            if batch is None:   # too few samples left for a batch of two: stop within --samples
                break
            before = generator.get_state()
            try:
                r = rollout(policy, episode, batch, generator, costs)
            except KeyboardInterrupt:
                generator.set_state(before)   # the batch was not learned from: a resume samples it again
                raise
            with deferred_interrupt():       # the update and its bookkeeping whole, or not at all
                stats = update(policy, optimizer, [episode], [r], config)
                draw(FINE_TUNE, r.actions.shape[0] * r.actions.shape[1])
                k, j = np.unravel_index(np.argmin(r.costs), r.costs.shape)
                if r.costs[k, j] < config.failure_ratio:
                    state.consider(episode.placement(r.actions[k, j]), float(r.costs[k, j] * state.scale), "sampled")
                state.seconds = time.monotonic() - started
            for name, value in stats.items():
                writer.add_scalar("charts/" + name, value, state.samples)
            writer.add_scalar("charts/best_step_time", state.best_step_time, state.samples)
            if time.monotonic() - saved >= CHECKPOINT_INTERVAL_S:
                checkpoint()
                saved = time.monotonic()
        out_of_time = budget_s is not None and time.monotonic() - started >= budget_s
        if budget.polish and not out_of_time and (state.polish or {}).get("end", -1) < end:
            with deferred_interrupt():   # seconds of simulation: whole, or not at all
                draw(POLISH, polish_best(episode, state, budget.remaining(POLISH), seed))
                state.seconds = time.monotonic() - started
            writer.add_scalar("charts/best_step_time", state.best_step_time, state.samples)
    except KeyboardInterrupt:
        interrupted = True
        log(f"interrupted at {state.samples} samples; the run is saved in {run_dir / 'checkpoint.pt'}")
    state.seconds = time.monotonic() - started
    checkpoint()
    greedy_time, closing, written = math.inf, None, None
    if not interrupted:
        try:
            greedy = place_episode(policy, episode, keep_heuristic=False)   # the policy as it ends: what it learned
            if rewards.reward != REAL:   # its rounds were simulated (measured ones count as the yardstick's do)
                draw(GREEDY_END, greedy.extra["placer"]["simulated"])
            greedy_time = rewards.placed(greedy)
            state.consider(greedy, greedy_time, "greedy")
            if rewards.reward == REAL:   # simulated figures are exact: nothing to measure again
                closing, written = _close(rewards, episode, state, greedy)
        except KeyboardInterrupt:   # the checkpoint is training's: a resume measures the end again
            interrupted = True
            log("interrupted while measuring the run's placements at its end; --resume measures them again")
    writer.close()
    if written is not None:
        written.save(run_dir / "placement.json")
    elif math.isfinite(state.best_step_time):   # else no placement ran: nothing to hand a user
        best = Placement.from_dict(state.best)
        best.extra["placer"][f"{rewards.figures}_step_time"] = state.best_step_time
        best.extra["placer"]["source"] = f"graph policy, fine-tuned ({state.best_source})"
        best.save(run_dir / "placement.json")
    save_policy(policy, run_dir / "policy.pt", {**(run_info or {}), "fine_tuned_on": episode.name})
    summary = _summary(state, episode, rewards, greedy_time, interrupted, run_info, closing)
    save_summary(run_dir, summary)
    return FinetuneResult(state.samples, state.zero_shot_step_time, state.best_step_time, greedy_time, summary,
                          interrupted)


def _start(policy, episode: Episode, rewards, chains: int = 0) -> FinetuneState:
    """A fresh run: the policy's own zero-shot placement (with `chains` sampled chains, as `placer
    place` makes it: every round of every chain simulated, and counted) is the best so far, or the
    best list heuristic's own placement where that is faster (one sample more)."""
    zero_shot = place_episode(policy, episode, keep_heuristic=False, chains=chains)   # the policy's own
    spent = zero_shot.extra["placer"]["simulated"] if rewards.reward != REAL else 0   # measured ones count as measurements
    zero_shot_time, heuristic = rewards.placed(zero_shot), rewards.heuristic()
    scale = next((t for t in (heuristic, zero_shot_time) if math.isfinite(t)), None)
    if scale is None:
        raise PlacerError(f"neither the best list heuristic's placement nor the policy's own ran on "
                          f"{episode.cluster.name}'s devices ({rewards.reward}), so there is no step time to learn "
                          "against; give the devices more memory (mem= caps), or use --policy seq2seq")
    curve = [{"samples": spent, "best_step_time": zero_shot_time}] if math.isfinite(zero_shot_time) else []
    state = FinetuneState(zero_shot_time, heuristic, scale, zero_shot.to_dict(), zero_shot_time, samples=spent,
                          curve=curve, zero_shot=zero_shot.to_dict())
    placement = episode.heuristic_placement()
    if placement is not None and heuristic < zero_shot_time:
        # as `placer place` and the per-graph learner's warm start: never hand a user a placement slower
        # than the heuristic already computed; the learning and the polish go on from the faster one
        if rewards.reward != REAL:   # its simulation counts as a sample (a measured one counts as the yardstick's)
            state.samples += 1
        placement.extra = {"placer": {"name": episode.best_name}}
        state.consider(placement, heuristic, f"the best list heuristic ({episode.best_name})")
    state.budget = {"drawn": {ZERO_SHOT: state.samples}}
    return state


def _greedy_cost(policy, episode: Episode, rewards) -> int:
    """The placements the policy's greedy chains at the end simulate (from nothing, and from the best
    heuristic's placement where there is one), each round of each; none with measured rewards."""
    return 0 if rewards.reward == REAL else greedy_chains(episode) * policy.config.rounds


def polish_best(episode: Episode, state: FinetuneState, samples: int, seed: int) -> int:
    """Local search's moves (`placers.local_search.improve`) from the best placement so far, on the
    policy's groups (split where the best heuristic cuts them) and then single ops, within
    `samples` simulated placements, each improvement put on the curve at the sample it was found:
    the policy's placement polished, as the per-graph learner's is. Returns the placements it
    simulated, for the caller to count."""
    from placer.placers.base import training_of
    from placer.placers.local_search import improve

    devices = episode.cluster.device_names
    best = Placement.from_dict(state.best)
    assign = np.asarray([devices.index(best.nodes[n]) for n in episode.graph.nodes], dtype=np.int64)
    groups = [np.flatnonzero(episode.node_group == g) for g in range(episode.features.n_groups)]
    found = improve(episode.graph, devices, episode.simulator, episode.caps, assign, state.best_step_time,
                    max(0, samples), groups, seed=seed, training=training_of(episode.cost))
    before, spent = state.best_step_time, state.samples
    for simulated, step_time in found.curve:   # each move taken: faster than the best so far
        state.samples = spent + simulated
        state.curve.append({"samples": state.samples, "best_step_time": step_time})
    state.samples = spent
    if found.curve:
        nodes = {n: devices[int(k)] for n, k in zip(episode.graph.nodes, found.assign)}
        state.best, state.best_step_time = Placement(list(devices), nodes, graph_sha256=episode.graph.sha256,
                                                     extra={"placer": {"name": "gnn"}}).to_dict(), found.step_time
        state.best_source = state.best_source if state.best_source.endswith("polished") else \
            f"{state.best_source}, polished"
    earlier = (state.polish or {}).get("samples", 0)   # a resumed run given more --samples polishes again
    # "end": the samples the run stops at, so that a resume to the same --samples does not polish again
    state.polish = {"end": spent + max(0, samples), "budget": max(0, samples), "samples": earlier + found.simulated,
                    "from_s": before, "to_s": found.step_time,
                    "group_moves": found.group_moves, "node_moves": found.node_moves,
                    "local_optimum": found.local_optimum}
    return found.simulated


def _resume(run_dir: Path, identity: dict[str, Any], policy, optimizer, generator, rewards, graph) -> FinetuneState:
    """Everything as the checkpoint left it; a `PlacerError` in one line for a run made otherwise."""
    data = load_checkpoint(run_dir, identity, defaults={"learner": "seq2seq"}, graph=graph)
    policy.load_state_dict(data["weights"])
    optimizer.load_state_dict(data["optimizer"])
    generator.set_state(data["rng"]["sampler"])
    torch.set_rng_state(data["rng"]["torch"])
    rewards.load_state(data["rewards"])
    return FinetuneState(**_with_ledger(data["state"]))


def _with_ledger(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's state with its sample ledger: one written before the ledger was kept counted
    the zero-shot start and the polish share on their own, and the rest in `samples`."""
    if "budget" in state:
        return state
    state = dict(state)
    start, polish = state.pop("start_samples", 0), state.pop("polish_share", 0.0)
    polished = (state.get("polish") or {}).get("samples", 0)
    state["budget"] = {"polish": polish, "drawn": {ZERO_SHOT: start, FINE_TUNE: state["samples"] - start - polished,
                                                   POLISH: polished}}
    return state


def _close(rewards, episode: Episode, state: FinetuneState, greedy: Placement):
    """The closing rounds (`closing.py`) and the placement to write, the fastest in them; (None,
    None) when none ran again, so that training's figures stand."""
    zero_shot = Placement.from_dict(state.zero_shot) if state.zero_shot else None
    placements = closing_placements(episode, Placement.from_dict(state.best), state.best_source, greedy, zero_shot)
    closing = measure_closing(rewards.measurer, placements, state.best_step_time)
    return (closing, fastest_placement(placements, closing)) if closing["fastest"] else (None, None)


def _summary(state: FinetuneState, episode: Episode, rewards, greedy_time: float, interrupted: bool,
             run_info: dict[str, Any] | None, closing: dict[str, Any] | None = None) -> RunSummary:
    """summary.json: the figures (None where a placement failed), which reward made them and how many samples;
    after closing rounds their figures, training's own under "during_training"."""
    def figure(t: float) -> float | None:
        return t if math.isfinite(t) else None

    training = {"zero_shot_step_time": figure(state.zero_shot_step_time), "greedy_step_time": figure(greedy_time),
                "best_step_time": figure(state.best_step_time), "best_source": state.best_source,
                "best_heuristic_step_time": figure(state.heuristic_step_time)}
    # measured figures are training's own unless closing rounds measured them again
    confirmed = {"confirmed_side_by_side": False} if rewards.reward == REAL else {}
    if closing is not None:
        confirmed = {**closing_figures(closing), "during_training": training}
    return RunSummary.from_dict({**(run_info or {}), "reward": rewards.reward, "simulated": rewards.reward != REAL,
            "samples": state.samples, "samples_by_reward": {REAL: 0, SIMULATED: 0, rewards.reward: state.samples},
            "samples_by_phase": SampleBudget.from_dict(state.budget).by_phase(ZERO_SHOT, FINE_TUNE, POLISH, GREEDY_END),
            **rewards.counts(), "wall_time_s": round(state.seconds, 1), "interrupted": interrupted,
            **training, "best_heuristic": episode.best_name, "curve": state.curve,
            **({"polish": state.polish} if state.polish else {}), **confirmed}, learner="graph policy")


def _last_batch(config: LearnConfig, left: int, rounds: int) -> LearnConfig | None:
    """The rollout that fits in the `left` samples (each sampled placement's `rounds` rounds all
    count): the usual one, a smaller last one, or None when not even two fit (an advantage needs two)."""
    k = min(config.samples, left // max(1, rounds))
    if k < 2:
        return None
    return config if k == config.samples else replace(config, samples=k)
