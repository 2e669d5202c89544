"""The training loop: sample placements, measure them, update the policy, log, checkpoint.

It reads top to bottom like the method: seed; measure every single-device placement (they
compete with the learned ones, so the result is never worse than the best single device);
then repeat { sample K placements from the policy, measure each through the environment,
one REINFORCE update, log } until the sample count or the time budget is reached; finally the
best placements and the single devices are measured again side by side. The run folder gets
TensorBoard events, `checkpoint.pt`, `placement.json` and `summary.json`.

The reward of a sample is measured for real, simulated, or simulated first and measured for
real later (`placer.policy.phases`); the checkpoint records which phase a run is in, so that
`--resume` continues exactly on either side of the switch.
"""

from __future__ import annotations

import json
import logging
import math
import random
import signal
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from placer.env.cache import CachingMeasurer
from placer.env.placement_env import PlacementEnv
from placer.graph.grouping import Grouping
from placer.graph.opgraph import OpGraph
from placer.measure.measurement import Measurement, Measurer
from placer.placement import Placement
from placer.policy.checkpoint import load_checkpoint, save_checkpoint
from placer.policy.hparams import Hyperparameters
from placer.policy.phases import DEFAULT_REAL_FRACTION, REAL, SIMULATED, DigestCache, RewardPlan
from placer.policy.reinforce import reinforce_update
from placer.policy.seq2seq import Seq2SeqPolicy
from placer.policy.tblog import hparams_table, placement_image
from placer.policy.warm_start import WarmStart, imitate

log = logging.getLogger(__name__)


@dataclass
class TrainState:
    """The counters and results that a checkpoint carries besides the tensors."""

    samples: int = 0                      # placements sampled from the policy so far
    updates: int = 0
    baseline: float | None = None
    wall_time_s: float = 0.0              # training time over all sessions of this run
    best: dict[str, Any] | None = None    # {"step_time", "group_devices", "measurement", "source"}
    top: list[dict[str, Any]] = field(default_factory=list)   # the TOP_K fastest distinct, like `best`
    single_device: dict[str, dict[str, Any]] = field(default_factory=dict)  # device -> measurement
    phase: str = REAL                     # the reward of the next samples: "real" or "simulated"
    phase_samples: dict[str, int] = field(default_factory=dict)   # samples taken with each reward
    switched_at: int | None = None        # hybrid: samples when real measurement took over
    simulated: dict[str, Any] | None = None   # hybrid: the simulated phase's best, top, single devices
    history: list[dict[str, Any]] = field(default_factory=list)   # one entry per update
    losses: list[float] = field(default_factory=list)             # policy loss of every update
    greedy: dict[str, Any] | None = None  # the policy's own (greedy) placement, as last measured
    warm_start: dict[str, Any] | None = None  # what the policy imitated before learning, and how long it took
    stopped: str | None = None            # "converged" when the run ended before its budget for that reason


# Placements measured again at the end: the fastest of a noisy lot is often just the luckiest.
TOP_K = 5
# Mean entropy per group (nats) under which the policy counts as converged: its samples then
# differ from its greedy placement in about one group in 50 on two devices.
CONVERGED_ENTROPY = 0.1


@dataclass
class TrainResult:
    """What a run produced: the best placement and how it compares with single devices."""

    placement: Placement
    summary: dict[str, Any]
    interrupted: bool
    policy: Seq2SeqPolicy | None = None
    env: PlacementEnv | None = None


@contextmanager
def _deferred_interrupt() -> Iterator[None]:
    """Hold Ctrl-C until the block ends, so an update is never half applied."""
    pending: list[Any] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda *a: pending.append(a))
    except ValueError:  # not the main thread: nothing to defer
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            raise KeyboardInterrupt


@contextmanager
def _policy_threads() -> Iterator[None]:
    """Run the policy on one thread: on a small shared machine extra intra-op threads only spin
    (measured 5x slower with two on two busy cores), and results do not depend on the core count."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _rng_state(sampler: torch.Generator, env: PlacementEnv) -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "sampler": sampler.get_state(), "env": env.np_random.bit_generator.state}


def _set_rng_state(state: dict[str, Any], sampler: torch.Generator, env: PlacementEnv) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    sampler.set_state(state["sampler"])
    env.np_random.bit_generator.state = state["env"]


def train(graph: OpGraph, measurer: Measurer | None, grouping: Grouping, run_dir: str | Path,
          hp: Hyperparameters = Hyperparameters(), *, samples: int | None = None, budget_s: float | None = None,
          seed: int = 0, resume: bool = False, progress: bool = False, checkpoint_every: int = 10,
          run_info: dict[str, Any] | None = None, confirm: Measurer | None = None,
          reward: str = REAL, simulator: Measurer | None = None, real_fraction: float = DEFAULT_REAL_FRACTION,
          checkpoint_interval_s: float = 30.0, warm_start: WarmStart | None = None) -> TrainResult:
    """Learn a placement of `graph` on the devices; stop after `samples` sampled placements
    (whole updates) or `budget_s` seconds of this session, whichever comes first.

    `reward` says where the samples' rewards come from (see `placer.policy.phases`): "real" uses
    `measurer`, "simulated" uses `simulator`, "hybrid" uses `simulator` and then `measurer` for
    the last `real_fraction` of the samples or budget. With `confirm` (a fresh measurer, no
    cache), the `TOP_K` fastest placements of each phase and every single device are measured
    again side by side at the end; those figures decide the result and the speedup. A simulated
    reward needs `confirm`, so that what a run reports is never a simulated figure.

    In the real phase a checkpoint is written every `checkpoint_every` updates; in the simulated
    phase, whose updates take milliseconds, at most every `checkpoint_interval_s` seconds.

    With `warm_start` (whose grouping must be `grouping`), the policy first imitates that
    placement (`placer.policy.warm_start`), then learns from there."""
    run_dir = Path(run_dir)
    if warm_start is not None and warm_start.grouping is not grouping:
        raise ValueError("train on the warm start's grouping: pass grouping=warm_start.grouping")
    if samples is None and budget_s is None:
        raise ValueError("give samples or budget_s")
    plan = RewardPlan(reward, real_fraction)
    if reward != REAL and (simulator is None or confirm is None):
        raise ValueError(f"reward {reward!r} needs a simulator and a real measurer to confirm with")
    if reward != SIMULATED and measurer is None:
        raise ValueError(f"reward {reward!r} needs a measurer")
    run_dir.mkdir(parents=True, exist_ok=True)

    # --- seeding: every source of randomness, in one place ---
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    sampler = torch.Generator().manual_seed(seed)

    # One cache per reward: a simulated and a real figure of one placement are different things.
    caches: dict[str, Any] = {}
    if reward != SIMULATED:
        caches[REAL] = CachingMeasurer(measurer)
    if reward != REAL:
        caches[SIMULATED] = DigestCache(simulator)
    state = TrainState(phase=plan.first_phase)
    env = PlacementEnv(graph, caches[state.phase], grouping=grouping, failure_time=hp.failure_time)
    obs, _ = env.reset(seed=seed)
    features = torch.from_numpy(obs["features"])
    adjacency = torch.from_numpy(obs["adjacency"])
    policy = Seq2SeqPolicy(features.shape[1], env.n_groups, env.n_devices, hp.hidden_size,
                           hp.temperature, hp.tanh_constant, hp.forget_bias)
    optimizer = torch.optim.Adam(policy.parameters(), lr=hp.lr)
    identity = {"graph_sha256": graph.sha256, "devices": env.devices, "grouping": grouping.signature(),
                "hparams": hp.to_dict(), "seed": seed, **plan.identity(),
                "simulator": _protocol(simulator) if reward != REAL else None,
                "warm_start": warm_start.source if warm_start is not None else None}
    if resume:
        # Checkpoints written before rewards had modes were real-measurement runs.
        data = load_checkpoint(run_dir, identity, defaults={"reward": REAL, "real_fraction": None, "simulator": None,
                                                            "warm_start": None})
        policy.load_state_dict(data["policy"])
        optimizer.load_state_dict(data["optimizer"])
        state = TrainState(**data["state"])
        if REAL in caches:
            caches[REAL].load_state(data["cache"])
        if SIMULATED in caches:
            caches[SIMULATED].load_state(data["sim_cache"])
        env.measurer = caches[state.phase]
        _set_rng_state(data["rng"], sampler, env)
        log.info("resumed %s at %d samples (%s reward)", run_dir, state.samples, state.phase)
    elif warm_start is not None:
        with _policy_threads():
            steps = imitate(policy, features, adjacency, warm_start.group_devices, hp.warm_start_confidence)
        state.warm_start = {"source": warm_start.source, "steps": steps,
                            "simulated_step_time": warm_start.simulated_step_time,
                            "candidates": warm_start.candidates}

    from torch.utils.tensorboard import SummaryWriter

    # On resume, events logged after the checkpoint (by an interrupted session) are dropped.
    writer = SummaryWriter(str(run_dir), purge_step=state.samples if resume else None)
    if not resume:
        writer.add_text("hyperparameters", hparams_table({**hp.to_dict(), "seed": seed, "groups": env.n_groups,
                                                          "grouping": grouping.method, "devices": env.devices,
                                                          "samples": samples, "budget_s": budget_s,
                                                          **plan.identity(), **(run_info or {})}))

    def tag(name: str) -> str:
        """TensorBoard tag of a figure of the current phase: simulated ones say so."""
        return f"charts/simulated_{name}" if state.phase == SIMULATED else f"charts/{name}"

    def consider(group_devices: list[int], measurement: Measurement, source: str) -> None:
        """Keep the fastest successful placements seen so far (in the current phase's figures)."""
        if not measurement.ok:
            return
        if state.phase == SIMULATED:
            source += ", simulated"
        entry = {"step_time": measurement.step_time, "group_devices": list(group_devices),
                 "measurement": measurement.to_dict(), "source": source}
        if all(t["group_devices"] != entry["group_devices"] for t in state.top):
            state.top = sorted(state.top + [entry], key=lambda t: t["step_time"])[:TOP_K]
        if state.best is None or measurement.step_time < state.best["step_time"]:
            state.best = entry
            node_devices = grouping.node_assignment(group_devices, list(graph.nodes))
            writer.add_image(tag("best_placement"), placement_image(node_devices, env.n_devices),
                             state.samples, dataformats="HWC")

    last_checkpoint = time.monotonic()

    def checkpoint() -> None:
        nonlocal last_checkpoint
        save_checkpoint(run_dir, {**identity, "policy": policy.state_dict(), "optimizer": optimizer.state_dict(),
                                  "cache": caches[REAL].state() if REAL in caches else None,
                                  "sim_cache": caches[SIMULATED].state() if SIMULATED in caches else None,
                                  "state": asdict(state), "rng": _rng_state(sampler, env)})
        last_checkpoint = time.monotonic()

    def measure_greedy() -> None:
        """Measure the policy's own placement (the most likely device of every group): the figure
        that says whether it learned, as opposed to the best sample, which random search also finds."""
        with torch.no_grad(), _policy_threads():
            greedy, _, _ = policy(features, adjacency, greedy=True)
        group_devices = [int(x) for x in greedy[0]]
        env.reset()
        _, _, _, _, info = env.step(np.asarray(group_devices, dtype=np.int64))
        m = Measurement.from_dict(info["measurement"])
        state.greedy = {"samples": state.samples, "phase": state.phase, "group_devices": group_devices,
                        "step_time": m.step_time if m.ok else None, "measurement": m.to_dict()}
        consider(group_devices, m, "policy greedy")

    def measure_single_devices() -> tuple[dict[str, dict[str, Any]], list[float]]:
        measurements, rewards = {}, []
        for d, device in enumerate(env.devices):
            env.reset()
            _, r, _, _, info = env.step(np.full(env.n_groups, d, dtype=np.int64))
            measurements[device] = info["measurement"]
            rewards.append(r)
        return measurements, rewards

    # --- the single-device placements are measured first and always compete ---
    if not state.single_device:
        state.single_device, rewards = measure_single_devices()
        for d, device in enumerate(env.devices):
            consider([d] * env.n_groups, Measurement.from_dict(state.single_device[device]), f"single device {device}")
        state.baseline = float(np.mean(rewards))   # the baseline starts from what a user has today

    def _snapshot() -> tuple[dict[str, Any], dict[str, tuple[int, int, int]]]:
        return _rng_state(sampler, env), {k: (c.hits, c.misses, len(c.entries)) for k, c in caches.items()}

    snapshot = None

    def switch_to_real() -> None:
        """Hybrid: from now on every sample is measured on the real devices."""
        nonlocal snapshot
        env.measurer = caches[REAL]
        singles, _ = measure_single_devices()      # real single devices compete in the real phase
        with _deferred_interrupt():
            state.simulated = {"samples": state.samples, "best": state.best, "top": state.top,
                               "single_device": state.single_device}
            state.phase, state.switched_at = REAL, state.samples
            state.best, state.top, state.single_device = None, [], singles
            for d, device in enumerate(env.devices):
                consider([d] * env.n_groups, Measurement.from_dict(singles[device]), f"single device {device}")
            # The moving average holds simulated rewards, on another scale (the profiled simulator's
            # times differ from measured ones by a factor that varies with load): against it every
            # real sample would look uniformly good or bad, a push on whatever happened to be
            # sampled. None: the first real batch is scored against its own mean, and the moving
            # average goes on from there.
            state.baseline = None
            checkpoint()
            snapshot = _snapshot()   # a Ctrl-C from here on must not undo the switch
        log.info("hybrid: switched to real measurement at %d samples", state.samples)

    from tqdm import tqdm

    by_time = samples is None
    switch_at = plan.switch_sample(samples, hp.samples_per_update) if not by_time else None
    switch_after_s = plan.switch_time(budget_s) if by_time else None
    bar = tqdm(total=int(budget_s) if by_time else samples, initial=0 if by_time else state.samples,
               unit="sample", disable=not progress, dynamic_ncols=True, desc="training",
               bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}/" + f"{int(budget_s)}s" + "{postfix}"
               if by_time else None)
    started = time.monotonic()
    session_start_wall = state.wall_time_s
    interrupted = False
    K = hp.samples_per_update
    try:
        while True:
            elapsed = time.monotonic() - started
            # What a checkpoint must hold if Ctrl-C lands before the next update: the state now.
            snapshot = _snapshot()
            # Hybrid turns to real measurement at its share of the budget, or sooner once the policy
            # has converged in the simulator: more simulated samples would only repeat themselves.
            if state.phase == SIMULATED and reward == "hybrid" and (
                    (switch_at is not None and state.samples >= switch_at)
                    or (switch_after_s is not None and elapsed >= switch_after_s) or _settled(state)):
                switch_to_real()
            if samples is not None and state.samples >= samples:
                break
            if budget_s is not None and elapsed >= budget_s:
                break
            # 0. the policy's own placement, as it stands before this update
            measure_greedy()
            # 1. sample K placements from the current policy
            with torch.no_grad(), _policy_threads():
                actions, _, _ = policy(features, adjacency, n_samples=K, generator=sampler)
            # 2. measure each through the environment
            rewards, step_times, failures, hits = [], [], 0, 0
            for a in actions.numpy():
                env.reset()
                _, reward_k, _, _, info = env.step(a)
                m = Measurement.from_dict(info["measurement"])
                rewards.append(reward_k)
                failures += not m.ok
                hits += m.cached
                if m.ok:
                    step_times.append(m.step_time)
                consider([int(x) for x in a], m, "policy")
            # 3. one REINFORCE update; 4. bookkeeping
            with _deferred_interrupt(), _policy_threads():
                r = torch.tensor(rewards, dtype=torch.float32)
                baseline = state.baseline if state.baseline is not None else float(r.mean())
                best_known = torch.tensor(state.best["group_devices"]) if state.best else None
                stats = reinforce_update(policy, optimizer, features, adjacency, actions, r,
                                         baseline, hp, state.updates, best=best_known)
                state.baseline = stats.new_baseline
                state.samples += K
                state.phase_samples[state.phase] = state.phase_samples.get(state.phase, 0) + K
                state.updates += 1
                state.wall_time_s = session_start_wall + time.monotonic() - started
                state.losses.append(stats.policy_loss)
                best = state.best["step_time"] if state.best else None
                state.history.append({"samples": state.samples, "phase": state.phase, "best_step_time": best,
                                      "sampled_step_time": float(np.mean(step_times)) if step_times else None,
                                      "reward_mean": float(r.mean()), "failure_rate": failures / K,
                                      "entropy": stats.entropy, "entropy_per_group": stats.entropy / env.n_groups,
                                      "greedy_step_time": state.greedy["step_time"], "repeated": hits / K,
                                      "baseline": stats.new_baseline})
            # 5. log (figures of the simulated phase are tagged charts/simulated_*)
            step = state.samples
            cache = caches[state.phase]
            writer.add_scalar(tag("reward_mean"), float(r.mean()), step)
            writer.add_scalar(tag("reward_max"), float(r.max()), step)
            if step_times:
                writer.add_scalar(tag("step_time_sampled"), float(np.mean(step_times)), step)
            if best is not None:
                writer.add_scalar(tag("best_step_time"), best, step)
            writer.add_scalar(tag("failure_rate"), failures / K, step)
            writer.add_scalar(tag("cache_hit_rate"), cache.hits / max(1, cache.hits + cache.misses), step)
            writer.add_scalar("charts/learning_rate", stats.lr, step)
            if reward == "hybrid":
                writer.add_scalar("charts/measured_for_real", float(state.phase == REAL), step)
            writer.add_scalar("losses/policy_loss", stats.policy_loss, step)
            writer.add_scalar("losses/entropy", stats.entropy, step)
            writer.add_scalar("losses/entropy_per_group", stats.entropy / env.n_groups, step)
            writer.add_scalar("losses/imitation", stats.imitation_loss, step)
            if state.greedy["step_time"] is not None:
                writer.add_scalar(tag("greedy_step_time"), state.greedy["step_time"], step)
            writer.add_scalar("losses/baseline", stats.baseline, step)
            writer.add_scalar("losses/grad_norm", stats.grad_norm, step)
            if (state.phase == REAL and state.updates % checkpoint_every == 0) or \
                    (state.phase == SIMULATED and time.monotonic() - last_checkpoint >= checkpoint_interval_s):
                checkpoint()
            label = "sim best" if state.phase == SIMULATED else "best"
            bar.set_postfix({"samples": state.samples, label: f"{best * 1e3:.2f}ms" if best is not None else "-"})
            bar.update(K if samples is not None else
                       max(0, min(int(time.monotonic() - started), int(budget_s)) - bar.n))
            # Settled: more samples would only repeat placements measured already.
            if _settled(state) and not (reward == "hybrid" and state.phase == SIMULATED):
                state.stopped = "converged"
                break
        measure_greedy()   # the policy as it ends: the placement it would give
    except KeyboardInterrupt:
        interrupted = True
        if snapshot is not None:   # forget the unfinished batch, so that --resume redoes it exactly
            _set_rng_state(snapshot[0], sampler, env)
            for k, (hits, misses, n) in snapshot[1].items():
                caches[k].hits, caches[k].misses = hits, misses
                for key in list(caches[k].entries)[n:]:
                    del caches[k].entries[key]
        log.warning("interrupted: saving the run at %d samples", state.samples)
    finally:
        bar.close()
        checkpoint()
        writer.flush()
        writer.close()

    confirmed = _confirm(confirm, grouping, env, state) if confirm is not None and state.single_device else None
    result = _write_outputs(graph, grouping, env, state, run_dir, measurer, interrupted, confirmed,
                            plan=plan, simulator=simulator, confirm=confirm)
    _log_result(run_dir, result.summary)
    result.policy, result.env = policy, env
    return result


def _settled(state: TrainState) -> bool:
    """The policy has converged (entropy per group) and its last batch only repeated placements
    measured before. Entropy alone is not enough: right after the warm start most groups are
    already certain, the mean is low, and yet the samples still explore."""
    last = state.history[-1] if state.history else {}
    return last.get("entropy_per_group", math.inf) <= CONVERGED_ENTROPY and last.get("repeated", 0.0) == 1.0


def _protocol(measurer: Measurer | None) -> Any:
    proto = getattr(measurer, "protocol", None)
    return proto.to_dict() if hasattr(proto, "to_dict") else proto


def _confirm(confirm: Measurer, grouping: Grouping, env: PlacementEnv, state: TrainState) -> dict[str, Any]:
    """Measure the fastest placements of training (of each phase) and each single device again,
    one after the other: training's figures were taken at different times under different load,
    or by the simulator, and the fastest of many noisy measurements is biased low."""
    def measure(group_devices: list[int]) -> dict[str, Any]:
        return confirm.measure(grouping.expand(group_devices, env.devices, env.graph.sha256)).to_dict()

    singles = {d: [i] * env.n_groups for i, d in enumerate(env.devices)}
    greedy = [{**state.greedy, "source": "policy greedy"}] if state.greedy and state.greedy["step_time"] else []
    phases = [(state.phase, greedy + state.top)] + ([(SIMULATED, state.simulated["top"])] if state.simulated else [])
    candidates, seen = [], list(singles.values())
    for phase, top in phases:
        for t in top:
            if t["group_devices"] in seen:
                continue
            seen.append(t["group_devices"])
            candidates.append({**t, "training_step_time": t["step_time"], "training_reward": phase,
                               "measurement": measure(t["group_devices"])})
    single_measurements = {d: measure(a) for d, a in singles.items()}
    for c in candidates:
        c["step_time"] = c["measurement"]["step_time"] if c["measurement"]["ok"] else None
    confirmed_greedy = None
    if state.greedy:
        same = [c["measurement"] for c in candidates if c["group_devices"] == state.greedy["group_devices"]]
        same += [single_measurements[d] for d, a in singles.items() if a == state.greedy["group_devices"]]
        confirmed_greedy = same[0] if same else None
    return {"candidates": candidates, "single_devices": single_measurements, "greedy": confirmed_greedy}


def _write_outputs(graph: OpGraph, grouping: Grouping, env: PlacementEnv, state: TrainState, run_dir: Path,
                   measurer: Measurer | None, interrupted: bool, confirmed: dict[str, Any] | None = None, *,
                   plan: RewardPlan = RewardPlan(), simulator: Measurer | None = None,
                   confirm: Measurer | None = None) -> TrainResult:
    """placement.json (the best placement) and summary.json (it against the single devices: the
    side-by-side figures of the confirmation when there is one, else those of training)."""
    def time_of(m: dict[str, Any]) -> float | None:
        return m.get("step_time") if m.get("ok") else None

    singles = {d: time_of(m) for d, m in state.single_device.items()}
    if confirmed is None:
        best = dict(state.best) if state.best else None
        single_measurements = state.single_device
    else:
        ran = [c for c in confirmed["candidates"] if c["step_time"] is not None]
        best = min(ran, key=lambda c: c["step_time"]) if ran else None
        single_measurements = confirmed["single_devices"]
    final_singles = {d: time_of(m) for d, m in single_measurements.items()}
    ok = {d: t for d, t in final_singles.items() if t is not None}
    best_single = min(ok, key=ok.__getitem__) if ok else None
    if best_single is not None and (best is None or ok[best_single] <= best["step_time"]):
        # A single device is as fast as anything found: that is the answer, never something slower.
        d = env.devices.index(best_single)
        best = {"group_devices": [d] * env.n_groups, "measurement": single_measurements[best_single],
                "step_time": ok[best_single], "source": f"single device {best_single}"}
    if best is None:
        placement = Placement.single_device(list(graph.nodes), env.devices[0], graph.sha256, env.devices)
    else:
        placement = grouping.expand(best["group_devices"], env.devices, graph.sha256)
        placement.measurement = best["measurement"]
        placement.extra = {"source": best["source"]}
        placement.save(run_dir / "placement.json")
    if state.greedy is not None:
        greedy = grouping.expand(state.greedy["group_devices"], env.devices, graph.sha256)
        greedy.extra = {"source": "policy greedy", "samples": state.samples}
        greedy.save(run_dir / "greedy_placement.json")
    best_time = best["step_time"] if best else None
    reported_by = confirm if confirmed is not None else measurer
    sim = state.simulated if state.simulated else (
        {"samples": state.samples, "best": state.best, "single_device": state.single_device}
        if state.phase == SIMULATED else None)
    summary = {
        "graph": graph.source, "graph_sha256": graph.sha256, "devices": env.devices,
        "groups": env.n_groups, "grouping": grouping.method, "group_members": grouping.groups,
        # What the reported figures (best, single devices, speedup) were measured with.
        "measurer": {"kind": type(reported_by).__name__, "protocol": _protocol(reported_by)},
        "reward": plan.reward,
        "real_fraction": plan.real_fraction if plan.reward == "hybrid" else None,
        "simulator": {"kind": type(simulator).__name__, "protocol": _protocol(simulator)} if simulator else None,
        "samples": state.samples, "updates": state.updates, "wall_time_s": state.wall_time_s,
        "samples_by_reward": {SIMULATED: state.phase_samples.get(SIMULATED, 0), REAL: state.phase_samples.get(REAL, 0)},
        "switched_to_real_at_sample": state.switched_at,
        "confirmed_side_by_side": confirmed is not None,
        "best_step_time": best_time, "best_source": best["source"] if best else None,
        "single_device_step_times": final_singles,
        "best_single_device": best_single,
        "best_single_device_step_time": ok.get(best_single) if best_single else None,
        "speedup_vs_best_single_device": ok[best_single] / best_time if best_single and best_time else None,
        # Training's own figures; "reward" says whether they were measured or simulated.
        "during_training": {"reward": state.phase,
                            "best_step_time": state.best["step_time"] if state.best else None,
                            "single_device_step_times": singles},
        "simulated_phase": {"samples": sim["samples"],
                            "simulated_best_step_time": sim["best"]["step_time"] if sim["best"] else None,
                            "simulated_single_device_step_times":
                                {d: time_of(m) for d, m in sim["single_device"].items()}} if sim else None,
        "confirmed_candidates": [{"source": c["source"], "training_reward": c.get("training_reward", REAL),
                                  "training_step_time": c["training_step_time"], "step_time": c["step_time"]}
                                 for c in confirmed["candidates"]] if confirmed else None,
        "interrupted": interrupted,
        **_learning_figures(state, env.n_groups, confirmed, ok.get(best_single) if best_single else None),
        "learning_curve": [{k: h.get(k, REAL) if k == "phase" else h[k]
                            for k in ("samples", "phase", "best_step_time", "sampled_step_time")}
                           for h in state.history],
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return TrainResult(placement, summary, interrupted)


def _learning_figures(state: TrainState, n_groups: int, confirmed: dict[str, Any] | None,
                      best_single_time: float | None) -> dict[str, Any]:
    """What says whether the policy learned: its own greedy placement (confirmed side by side when
    there was a confirmation), the best sample, the mean of the last 10% of samples, the entropy."""
    history = [h for h in state.history if h.get("phase", REAL) == state.phase]
    tail = history[len(history) - max(1, len(history) // 10):] if history else []
    sampled = [h["sampled_step_time"] for h in tail if h["sampled_step_time"] is not None]
    entropy = state.history[-1].get("entropy_per_group") if state.history else None
    greedy = None
    if state.greedy is not None:
        m = confirmed["greedy"] if confirmed and confirmed.get("greedy") else state.greedy["measurement"]
        step = m.get("step_time") if m.get("ok") else None
        greedy = {"step_time": step, "confirmed_side_by_side": bool(confirmed and confirmed.get("greedy")),
                  "training_step_time": state.greedy["step_time"], "training_reward": state.greedy["phase"],
                  "speedup_vs_best_single_device": best_single_time / step if step and best_single_time else None}
    return {"greedy": greedy,
            "best_sample_step_time": state.best["step_time"] if state.best else None,
            "mean_sampled_step_time_last_10pct": float(np.mean(sampled)) if sampled else None,
            "entropy_per_group": entropy,
            "converged": entropy is not None and entropy <= CONVERGED_ENTROPY,
            "stopped_early": state.stopped,
            "warm_start": state.warm_start}


def _log_result(run_dir: Path, summary: dict[str, Any]) -> None:
    """The run's reported figures (real ones when confirmed) as TensorBoard scalars at the last step."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(run_dir)) as writer:
        step = summary["samples"]
        prefix = "result" if summary["confirmed_side_by_side"] else "result_unconfirmed"
        if summary["best_step_time"] is not None:
            writer.add_scalar(f"{prefix}/best_step_time", summary["best_step_time"], step)
        if summary["best_single_device_step_time"] is not None:
            writer.add_scalar(f"{prefix}/best_single_device_step_time", summary["best_single_device_step_time"], step)
        if summary["speedup_vs_best_single_device"] is not None:
            writer.add_scalar(f"{prefix}/speedup_vs_best_single_device", summary["speedup_vs_best_single_device"], step)
        greedy = summary["greedy"]
        if greedy and greedy["step_time"] is not None:
            writer.add_scalar(f"{prefix}/greedy_step_time", greedy["step_time"], step)
