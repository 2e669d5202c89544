"""The training loop: sample placements, measure them, update the policy, log, checkpoint.

It reads top to bottom like the method: seed; measure every single-device placement (they
compete with the learned ones, so the result is never worse than the best single device);
then repeat { sample K placements from the policy, measure each through the environment,
one REINFORCE update, log } until the sample count or the time budget is reached. The run
folder gets TensorBoard events, `checkpoint.pt`, `placement.json` and `summary.json`.
"""

from __future__ import annotations

import json
import logging
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
from placer.policy.reinforce import reinforce_update
from placer.policy.seq2seq import Seq2SeqPolicy
from placer.policy.tblog import hparams_table, placement_image

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
    history: list[dict[str, Any]] = field(default_factory=list)   # one entry per update
    losses: list[float] = field(default_factory=list)             # policy loss of every update


# Placements measured again at the end: the fastest of a noisy lot is often just the luckiest.
TOP_K = 5


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


def train(graph: OpGraph, measurer: Measurer, grouping: Grouping, run_dir: str | Path,
          hp: Hyperparameters = Hyperparameters(), *, samples: int | None = None, budget_s: float | None = None,
          seed: int = 0, resume: bool = False, progress: bool = False, checkpoint_every: int = 10,
          run_info: dict[str, Any] | None = None, confirm: Measurer | None = None) -> TrainResult:
    """Learn a placement of `graph` on `measurer`'s devices; stop after `samples` sampled
    placements (whole updates) or `budget_s` seconds of this session, whichever comes first.

    With `confirm` (a fresh measurer, no cache), the `TOP_K` fastest placements of training and
    every single device are measured again side by side at the end; those figures decide the
    result and the speedup."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if samples is None and budget_s is None:
        raise ValueError("give samples or budget_s")

    # --- seeding: every source of randomness, in one place ---
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    sampler = torch.Generator().manual_seed(seed)

    cache = CachingMeasurer(measurer)
    env = PlacementEnv(graph, cache, grouping=grouping, failure_time=hp.failure_time)
    obs, _ = env.reset(seed=seed)
    features = torch.from_numpy(obs["features"])
    adjacency = torch.from_numpy(obs["adjacency"])
    policy = Seq2SeqPolicy(features.shape[1], env.n_groups, env.n_devices, hp.hidden_size,
                           hp.temperature, hp.tanh_constant, hp.forget_bias)
    optimizer = torch.optim.Adam(policy.parameters(), lr=hp.lr)
    state = TrainState()
    identity = {"graph_sha256": graph.sha256, "devices": env.devices, "grouping": grouping.signature(),
                "hparams": hp.to_dict(), "seed": seed}
    if resume:
        data = load_checkpoint(run_dir, identity)
        policy.load_state_dict(data["policy"])
        optimizer.load_state_dict(data["optimizer"])
        cache.load_state(data["cache"])
        state = TrainState(**data["state"])
        _set_rng_state(data["rng"], sampler, env)
        log.info("resumed %s at %d samples", run_dir, state.samples)

    from torch.utils.tensorboard import SummaryWriter

    # On resume, events logged after the checkpoint (by an interrupted session) are dropped.
    writer = SummaryWriter(str(run_dir), purge_step=state.samples if resume else None)
    if not resume:
        writer.add_text("hyperparameters", hparams_table({**hp.to_dict(), "seed": seed, "groups": env.n_groups,
                                                          "grouping": grouping.method, "devices": env.devices,
                                                          "samples": samples, "budget_s": budget_s,
                                                          **(run_info or {})}))

    def consider(group_devices: list[int], measurement: Measurement, source: str) -> None:
        """Keep the fastest successful placements seen so far."""
        if not measurement.ok:
            return
        entry = {"step_time": measurement.step_time, "group_devices": list(group_devices),
                 "measurement": measurement.to_dict(), "source": source}
        if all(t["group_devices"] != entry["group_devices"] for t in state.top):
            state.top = sorted(state.top + [entry], key=lambda t: t["step_time"])[:TOP_K]
        if state.best is None or measurement.step_time < state.best["step_time"]:
            state.best = entry
            node_devices = grouping.node_assignment(group_devices, list(graph.nodes))
            writer.add_image("charts/best_placement", placement_image(node_devices, env.n_devices),
                             state.samples, dataformats="HWC")

    def checkpoint() -> None:
        save_checkpoint(run_dir, {**identity, "policy": policy.state_dict(), "optimizer": optimizer.state_dict(),
                                  "cache": cache.state(), "state": asdict(state),
                                  "rng": _rng_state(sampler, env)})

    # --- the single-device placements are measured first and always compete ---
    if not state.single_device:
        rewards = []
        for d, device in enumerate(env.devices):
            env.reset()
            _, reward, _, _, info = env.step(np.full(env.n_groups, d, dtype=np.int64))
            state.single_device[device] = info["measurement"]
            rewards.append(reward)
            consider([d] * env.n_groups, Measurement.from_dict(info["measurement"]), f"single device {device}")
        state.baseline = float(np.mean(rewards))   # the baseline starts from what a user has today

    from tqdm import tqdm

    by_time = samples is None
    bar = tqdm(total=int(budget_s) if by_time else samples, initial=0 if by_time else state.samples,
               unit="sample", disable=not progress, dynamic_ncols=True, desc="training",
               bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}/" + f"{int(budget_s)}s" + "{postfix}"
               if by_time else None)
    started = time.monotonic()
    session_start_wall = state.wall_time_s
    interrupted = False
    K = hp.samples_per_update
    snapshot = None
    try:
        while True:
            elapsed = time.monotonic() - started
            if samples is not None and state.samples >= samples:
                break
            if budget_s is not None and elapsed >= budget_s:
                break
            # What a checkpoint must hold if Ctrl-C lands inside this batch: the state before it.
            snapshot = (_rng_state(sampler, env), cache.hits, cache.misses, len(cache.entries))
            # 1. sample K placements from the current policy
            with torch.no_grad(), _policy_threads():
                actions, _, _ = policy(features, adjacency, n_samples=K, generator=sampler)
            # 2. measure each through the environment
            rewards, step_times, failures, hits = [], [], 0, 0
            for a in actions.numpy():
                env.reset()
                _, reward, _, _, info = env.step(a)
                m = Measurement.from_dict(info["measurement"])
                rewards.append(reward)
                failures += not m.ok
                hits += m.cached
                if m.ok:
                    step_times.append(m.step_time)
                consider([int(x) for x in a], m, "policy")
            # 3. one REINFORCE update; 4. bookkeeping
            with _deferred_interrupt(), _policy_threads():
                r = torch.tensor(rewards, dtype=torch.float32)
                stats = reinforce_update(policy, optimizer, features, adjacency, actions, r,
                                         state.baseline, hp, state.updates)
                state.baseline = stats.new_baseline
                state.samples += K
                state.updates += 1
                state.wall_time_s = session_start_wall + time.monotonic() - started
                state.losses.append(stats.policy_loss)
                best = state.best["step_time"] if state.best else None
                state.history.append({"samples": state.samples, "best_step_time": best,
                                      "sampled_step_time": float(np.mean(step_times)) if step_times else None,
                                      "reward_mean": float(r.mean()), "failure_rate": failures / K,
                                      "entropy": stats.entropy, "baseline": stats.new_baseline})
            # 5. log
            step = state.samples
            writer.add_scalar("charts/reward_mean", float(r.mean()), step)
            writer.add_scalar("charts/reward_max", float(r.max()), step)
            if step_times:
                writer.add_scalar("charts/step_time_sampled", float(np.mean(step_times)), step)
            if best is not None:
                writer.add_scalar("charts/best_step_time", best, step)
            writer.add_scalar("charts/failure_rate", failures / K, step)
            writer.add_scalar("charts/cache_hit_rate", cache.hits / max(1, cache.hits + cache.misses), step)
            writer.add_scalar("charts/learning_rate", stats.lr, step)
            writer.add_scalar("losses/policy_loss", stats.policy_loss, step)
            writer.add_scalar("losses/entropy", stats.entropy, step)
            writer.add_scalar("losses/baseline", stats.baseline, step)
            writer.add_scalar("losses/grad_norm", stats.grad_norm, step)
            if state.updates % checkpoint_every == 0:
                checkpoint()
            bar.set_postfix(samples=state.samples, best=f"{best * 1e3:.2f}ms" if best is not None else "-")
            bar.update(K if samples is not None else
                       max(0, min(int(time.monotonic() - started), int(budget_s)) - bar.n))
    except KeyboardInterrupt:
        interrupted = True
        if snapshot is not None:   # forget the unfinished batch, so that --resume redoes it exactly
            _set_rng_state(snapshot[0], sampler, env)
            cache.hits, cache.misses = snapshot[1], snapshot[2]
            for key in list(cache.entries)[snapshot[3]:]:
                del cache.entries[key]
        log.warning("interrupted: saving the run at %d samples", state.samples)
    finally:
        bar.close()
        checkpoint()
        writer.flush()
        writer.close()

    confirmed = _confirm(confirm, grouping, env, state) if confirm is not None and state.single_device else None
    result = _write_outputs(graph, grouping, env, state, run_dir, measurer, interrupted, confirmed)
    result.policy, result.env = policy, env
    return result


def _protocol(measurer: Measurer) -> Any:
    proto = getattr(measurer, "protocol", None)
    return proto.to_dict() if hasattr(proto, "to_dict") else proto


def _confirm(confirm: Measurer, grouping: Grouping, env: PlacementEnv, state: TrainState) -> dict[str, Any]:
    """Measure the fastest placements of training and each single device again, one after the
    other: training's figures were taken at different times under different load, and the
    fastest of many noisy measurements is biased low."""
    def measure(group_devices: list[int]) -> dict[str, Any]:
        return confirm.measure(grouping.expand(group_devices, env.devices, env.graph.sha256)).to_dict()

    singles = {d: [i] * env.n_groups for i, d in enumerate(env.devices)}
    candidates = [{**t, "training_step_time": t["step_time"], "measurement": measure(t["group_devices"])}
                  for t in state.top if t["group_devices"] not in singles.values()]
    single_measurements = {d: measure(a) for d, a in singles.items()}
    for c in candidates:
        c["step_time"] = c["measurement"]["step_time"] if c["measurement"]["ok"] else None
    return {"candidates": candidates, "single_devices": single_measurements}


def _write_outputs(graph: OpGraph, grouping: Grouping, env: PlacementEnv, state: TrainState, run_dir: Path,
                   measurer: Measurer, interrupted: bool, confirmed: dict[str, Any] | None = None) -> TrainResult:
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
    best_time = best["step_time"] if best else None
    summary = {
        "graph": graph.source, "graph_sha256": graph.sha256, "devices": env.devices,
        "groups": env.n_groups, "grouping": grouping.method,
        "measurer": {"kind": type(measurer).__name__, "protocol": _protocol(measurer)},
        "samples": state.samples, "updates": state.updates, "wall_time_s": state.wall_time_s,
        "confirmed_side_by_side": confirmed is not None,
        "best_step_time": best_time, "best_source": best["source"] if best else None,
        "single_device_step_times": final_singles,
        "best_single_device": best_single,
        "best_single_device_step_time": ok.get(best_single) if best_single else None,
        "speedup_vs_best_single_device": ok[best_single] / best_time if best_single and best_time else None,
        "during_training": {"best_step_time": state.best["step_time"] if state.best else None,
                            "single_device_step_times": singles},
        "confirmed_candidates": [{"source": c["source"], "training_step_time": c["training_step_time"],
                                  "step_time": c["step_time"]} for c in confirmed["candidates"]]
        if confirmed else None,
        "interrupted": interrupted,
        "learning_curve": [{k: h[k] for k in ("samples", "best_step_time", "sampled_step_time")}
                           for h in state.history],
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return TrainResult(placement, summary, interrupted)
