"""`TrainingSession`: everything the training loop acts on, and one method per thing it does.

The loop (`placer.policy.trainer.train`) reads like the method; this is where each of its steps
lives: sample K placements from the policy, measure them (each distinct one once, in one batch),
the update, logging, checkpoints, the hybrid switch and the exact rollback of a batch that Ctrl-C
interrupted. Everything that must survive `--resume` is in `state` (plain data), the tensors, the
caches and the random generators, and all of it goes into one checkpoint.
"""

from __future__ import annotations

import logging
import math
import random
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from placer.env.placement_env import PlacementEnv
from placer.graph.grouping import Grouping
from placer.graph.opgraph import OpGraph
from placer.interrupts import deferred_interrupt
from placer.measure.measurement import Measurement, Measurer
from placer.policy.checkpoint import load_checkpoint, save_checkpoint
from placer.policy.hparams import Hyperparameters
from placer.policy.measurement_cache import MeasurementCache
from placer.policy.phases import REAL, SIMULATED, RewardPlan
from placer.policy.reinforce import UpdateStats, reinforce_update
from placer.policy.run_state import TrainState
from placer.policy.seq2seq import Seq2SeqPolicy
from placer.policy.sim_to_real import ResidualFit, balance, explore
from placer.policy.tblog import hparams_table, log_update, placement_image
from placer.policy.warm_start import WarmStart, imitate

log = logging.getLogger(__name__)

# In the real phase a checkpoint every this many updates; in the simulated phase, whose updates
# take milliseconds, at most every this many seconds.
CHECKPOINT_EVERY = 10
CHECKPOINT_INTERVAL_S = 30.0


@dataclass
class RewardSources:
    """Where rewards come from (`plan`), and what measures them: `real` and `simulated` measurers
    for the phases, `confirm` for the side-by-side measurement at the end."""

    plan: RewardPlan
    real: Measurer | None = None
    simulated: Measurer | None = None
    confirm: Measurer | None = None

    def check(self) -> None:
        reward = self.plan.reward
        if reward != REAL and (self.simulated is None or self.confirm is None):
            raise ValueError(f"reward {reward!r} needs a simulator and a real measurer to confirm with")
        if reward != SIMULATED and self.real is None:
            raise ValueError(f"reward {reward!r} needs a measurer")


@contextmanager
def policy_threads() -> Iterator[None]:
    """Run the policy on one thread: on a small shared machine extra intra-op threads only spin
    (measured 5x slower with two on two busy cores), and results do not depend on the core count."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def describe_protocol(measurer: Measurer | None) -> Any:
    """How `measurer` measures, as plain data (for the checkpoint identity and the summary)."""
    proto = getattr(measurer, "protocol", None)
    return proto.to_dict() if hasattr(proto, "to_dict") else proto


def describe_objective(sources: RewardSources) -> dict[str, Any]:
    """What one step is, as the measurers measure it: the forward pass, or a training step with its
    loss and optimizer (for the checkpoint identity and the summary)."""
    for measurer in (sources.confirm, sources.real, sources.simulated):
        if hasattr(measurer, "training"):
            training = measurer.training
        elif hasattr(measurer, "simulator"):
            training = measurer.simulator.training
        else:
            continue
        return {"objective": "training", **training.to_dict()} if training else {"objective": "inference"}
    return {"objective": "inference"}


class TrainingSession:
    """The policy, its optimizer, the environment, the caches, the TensorBoard writer and the
    state of one run in `run_dir`, set up fresh (seeded, warm-started) or from its checkpoint."""

    def __init__(self, graph: OpGraph, grouping: Grouping, run_dir: Path, hp: Hyperparameters,
                 sources: RewardSources, *, seed: int, resume: bool, warm_start: WarmStart | None,
                 run_info: dict[str, Any], counts_evaluations: bool = False) -> None:
        if warm_start is not None and warm_start.grouping is not grouping:
            raise ValueError("train on the warm start's grouping: pass grouping=warm_start.grouping")
        sources.check()
        self.graph, self.grouping, self.run_dir, self.hp, self.sources = graph, grouping, run_dir, hp, sources
        self.counts_evaluations = counts_evaluations   # see `count_evaluated`
        run_dir.mkdir(parents=True, exist_ok=True)

        # --- seeding: every source of randomness, in one place ---
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        self.sampler = torch.Generator().manual_seed(seed)

        plan = sources.plan
        self.state = TrainState(phase=plan.first_phase)
        first = sources.real if plan.first_phase == REAL else sources.simulated
        self.env = PlacementEnv(graph, first, grouping=grouping, failure_time=hp.failure_time)
        obs, _ = self.env.reset(seed=seed)
        self.features = torch.from_numpy(obs["features"])
        self.adjacency = torch.from_numpy(obs["adjacency"])
        self.n_groups, self.devices = self.env.n_groups, self.env.devices
        self._group_sizes = [len(g) for g in grouping.groups]
        # One cache per reward: a simulated and a real figure of one placement are different things.
        self.caches: dict[str, MeasurementCache] = {}
        if plan.reward != SIMULATED:
            self.caches[REAL] = MeasurementCache(sources.real, self.expand, self.n_groups)
        if plan.reward != REAL:
            self.caches[SIMULATED] = MeasurementCache(sources.simulated, self.expand, self.n_groups)
        self.policy = Seq2SeqPolicy(self.features.shape[1], self.n_groups, len(self.devices), hp.hidden_size,
                                    hp.temperature, hp.tanh_constant, hp.forget_bias)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=hp.lr)
        self.objective = describe_objective(sources)   # a forward pass, or a training step
        # "learner" first: a graph policy fine-tune's checkpoint is refused as such (policy/gnn/finetune.py)
        self.identity = {"learner": "seq2seq", "graph_sha256": graph.sha256, "devices": self.devices,
                         "grouping": grouping.signature(), "hparams": hp.to_dict(), "seed": seed, **plan.identity(),
                         "objective": self.objective,
                         "simulator": describe_protocol(sources.simulated) if plan.reward != REAL else None,
                         "warm_start": warm_start.source if warm_start is not None else None}
        if resume:
            self._resume()
        elif warm_start is not None:
            with policy_threads():
                steps = imitate(self.policy, self.features, self.adjacency, warm_start.group_devices,
                                hp.warm_start_confidence)
            self.state.warm_start = {"source": warm_start.source, "steps": steps,
                                     "simulated_step_time": warm_start.simulated_step_time,
                                     "candidates": warm_start.candidates}

        from torch.utils.tensorboard import SummaryWriter

        # On resume, events logged after the checkpoint (by an interrupted session) are dropped.
        self.writer = SummaryWriter(str(run_dir), purge_step=self.state.samples if resume else None)
        if not resume:
            self.writer.add_text("hyperparameters", hparams_table(
                {**hp.to_dict(), "seed": seed, "groups": self.n_groups, "grouping": grouping.method,
                 "devices": self.devices, **plan.identity(), **run_info}))
        self._last_checkpoint = time.monotonic()
        self._snapshot: tuple[dict[str, Any], dict[str, tuple[int, int, int]]] | None = None

    # --- the steps of the loop ---

    @property
    def cache(self) -> MeasurementCache:
        """The cache of the current phase's reward."""
        return self.caches[self.state.phase]

    def expand(self, group_devices) -> Any:
        """The `Placement` of a device index per group."""
        return self.grouping.expand(list(group_devices), self.devices, self.graph.sha256)

    def sample(self, n: int | None = None) -> torch.Tensor:
        """K placements (K x groups device indices; K = `n`, by default the samples per update) drawn
        from the current policy; in a hybrid run's real phase each is moved a little
        (`sim_to_real.explore`), so that the policy keeps exploring."""
        with torch.no_grad(), policy_threads():
            actions, _, _ = self.policy(self.features, self.adjacency, n_samples=n or self.hp.samples_per_update,
                                        generator=self.sampler)
        if self._sim_to_real():
            actions = explore(actions, len(self.devices), self.hp.real_explore, self.sampler)
        return actions

    def _sim_to_real(self) -> bool:
        return self.sources.plan.reward == "hybrid" and self.state.phase == REAL

    def _residual(self) -> ResidualFit:
        return ResidualFit(**self.state.sim_to_real) if self.state.sim_to_real else ResidualFit()

    def _balance(self, group_devices) -> float:
        return balance(group_devices, len(self.devices), self._group_sizes)

    def compare_with_simulator(self, group_devices: list[list[int]], measurements: list[Measurement]) -> None:
        """Hybrid, real phase: each real sample beside what the simulator predicted for it, into the
        residual fit and TensorBoard (`charts/sim_error`: simulated / measured - 1; `..._corrected`:
        the same after the fit so far)."""
        if not self._sim_to_real():
            return
        fit = self._residual()
        predicted = self.caches[SIMULATED].measure_many(group_devices)
        first = self.state.samples
        for i, (a, p, m) in enumerate(zip(group_devices, predicted, measurements)):
            if not (m.ok and p.ok) or m.cached:
                continue
            x = self._balance(a)
            self.writer.add_scalar("charts/sim_error", p.step_time / m.step_time - 1.0, first + i)
            self.writer.add_scalar("charts/sim_error_corrected", fit.correct(p.step_time, x) / m.step_time - 1.0,
                                   first + i)
            fit.add(p.step_time, m.step_time, x)
        fit.fit()
        self.state.sim_to_real = fit.to_dict()

    def refine_on_corrected_simulator(self) -> None:
        """Hybrid, real phase: a few updates on the simulator corrected by the residual fit (cheap),
        before the next real batch; the fastest real placement is still the one imitated."""
        if not self._sim_to_real() or not self.state.sim_to_real or self.hp.sim_refine_updates < 1:
            return
        fit = self._residual()
        best = torch.tensor(self.state.best["group_devices"]) if self.state.best else None
        for _ in range(self.hp.sim_refine_updates):
            with torch.no_grad(), policy_threads():
                actions, _, _ = self.policy(self.features, self.adjacency, n_samples=self.hp.samples_per_update,
                                            generator=self.sampler)
            group_devices = [[int(x) for x in a] for a in actions.tolist()]
            predicted = self.caches[SIMULATED].measure_many(group_devices)
            rewards = torch.tensor([-math.sqrt(fit.correct(p.step_time, self._balance(a)) if p.ok
                                               else self.hp.failure_time) for a, p in zip(group_devices, predicted)],
                                   dtype=torch.float32)
            with policy_threads():
                reinforce_update(self.policy, self.optimizer, self.features, self.adjacency, actions, rewards,
                                 float(rewards.mean()), self.hp, self.state.updates, best=best)

    def measure(self, actions: torch.Tensor) -> list[Measurement]:
        """Measure each placement (repeats come from the cache) and keep the fastest."""
        group_devices = [[int(x) for x in a] for a in actions.tolist()]
        measurements = self.cache.measure_many(group_devices)
        for a, m in zip(group_devices, measurements):
            self._consider(a, m, "policy")
        return measurements

    def update(self, actions: torch.Tensor, measurements: list[Measurement]) -> UpdateStats:
        """One policy update on the batch (`placer.policy.reinforce`), then the bookkeeping."""
        state = self.state
        self.compare_with_simulator([[int(x) for x in a] for a in actions.tolist()], measurements)
        with policy_threads():
            rewards = torch.tensor([self.env.reward(m) for m in measurements], dtype=torch.float32)
            baseline = state.baseline if state.baseline is not None else float(rewards.mean())
            best = torch.tensor(state.best["group_devices"]) if state.best else None
            stats = reinforce_update(self.policy, self.optimizer, self.features, self.adjacency, actions, rewards,
                                     baseline, self.hp, state.updates, best=best)
        K = len(measurements)
        step_times = [m.step_time for m in measurements if m.ok]
        state.baseline = stats.new_baseline
        state.samples += K
        state.phase_samples[state.phase] = state.phase_samples.get(state.phase, 0) + K
        state.updates += 1
        state.losses.append(stats.policy_loss)
        state.history.append({
            "samples": state.samples, "phase": state.phase,
            "best_step_time": state.best["step_time"] if state.best else None,
            "sampled_step_time": float(np.mean(step_times)) if step_times else None,
            "reward_mean": float(rewards.mean()), "reward_max": float(rewards.max()),
            "failure_rate": sum(not m.ok for m in measurements) / K,
            "entropy": stats.entropy, "entropy_per_group": stats.entropy / self.n_groups,
            "greedy_step_time": None,   # filled in by measure_greedy, right after the update
            "repeated": sum(m.cached for m in measurements) / K, "baseline": stats.new_baseline})
        return stats

    def log(self, stats: UpdateStats) -> None:
        """The update's figures to TensorBoard (`charts/simulated_*` in the simulated phase)."""
        log_update(self.writer, self.state, stats, self.cache.hit_rate(), self.sources.plan.reward == "hybrid")

    def measure_greedy(self) -> None:
        """Measure the policy's own placement (the most likely device of every group): the figure
        that says whether it learned, as opposed to the best sample, which random search also finds."""
        with torch.no_grad(), policy_threads():
            greedy, _, _ = self.policy(self.features, self.adjacency, greedy=True)
        group_devices = [int(x) for x in greedy[0]]
        m = self.cache.measure(group_devices)
        step_time = m.step_time if m.ok else None
        if self.state.history and self.state.history[-1]["samples"] == self.state.samples:
            self.state.history[-1]["greedy_step_time"] = step_time
        self.count_evaluated([m])
        self.state.greedy = {"samples": self.state.samples, "phase": self.state.phase,
                             "group_devices": group_devices, "step_time": step_time, "measurement": m.to_dict()}
        self._consider(group_devices, m, "policy greedy")

    def measure_single_devices(self, cache: MeasurementCache | None = None) -> list[Measurement]:
        """Every single-device placement (by `cache`, default the current phase's)."""
        measurements = (cache or self.cache).measure_many([[d] * self.n_groups for d in range(len(self.devices))])
        self.count_evaluated(measurements)
        return measurements

    def count_evaluated(self, measurements: list[Measurement]) -> None:
        """With `counts_evaluations` (a described cluster's run, whose samples are the budget of the
        searches it is compared with) the placements measured besides the samples, the greedy one and
        the single devices, count in the samples too. Only those simulated now: one the cache answered
        was not simulated again, and was counted when it was (a sample counts in its batch anyway)."""
        if not self.counts_evaluations:
            return
        n = sum(not m.cached for m in measurements)
        self.state.samples += n
        self.state.phase_samples[self.state.phase] = self.state.phase_samples.get(self.state.phase, 0) + n

    def enter_single_devices(self, measurements: list[Measurement]) -> None:
        """The single devices compete with the learned placements, so the result is never worse
        than what a user has today."""
        self.state.single_device = {dev: m.to_dict() for dev, m in zip(self.devices, measurements)}
        for d, (dev, m) in enumerate(zip(self.devices, measurements)):
            self._consider([d] * self.n_groups, m, f"single device {dev}")

    def switch_to_real(self) -> None:
        """Hybrid: from now on every sample is measured on the real devices."""
        singles = self.measure_single_devices(self.caches[REAL])   # real single devices compete in the real phase
        with deferred_interrupt():
            self.state.start_real_phase()
            self.env.measurer = self.sources.real
            self.enter_single_devices(singles)
            self.checkpoint()
            self.take_snapshot()                # a Ctrl-C from here on must not undo the switch
        log.info("hybrid: switched to real measurement at %d samples", self.state.samples)

    def _consider(self, group_devices: list[int], m: Measurement, source: str) -> None:
        if self.state.consider(group_devices, m, source):
            image = placement_image(self.grouping.node_assignment(group_devices, list(self.graph.nodes)),
                                    len(self.devices))
            tag = "charts/simulated_best_placement" if self.state.phase == SIMULATED else "charts/best_placement"
            self.writer.add_image(tag, image, self.state.samples, dataformats="HWC")

    # --- checkpoints and interruption ---

    def checkpoint(self) -> None:
        save_checkpoint(self.run_dir, {
            **self.identity, "policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
            "cache": self.caches[REAL].state() if REAL in self.caches else None,
            "sim_cache": self.caches[SIMULATED].state() if SIMULATED in self.caches else None,
            "state": asdict(self.state), "rng": self._rng_state()})
        self._last_checkpoint = time.monotonic()

    def checkpoint_if_due(self) -> None:
        """Every CHECKPOINT_EVERY real updates; at most every CHECKPOINT_INTERVAL_S simulated."""
        if self.state.phase == REAL:
            due = self.state.updates % CHECKPOINT_EVERY == 0
        else:
            due = time.monotonic() - self._last_checkpoint >= CHECKPOINT_INTERVAL_S
        if due:
            self.checkpoint()

    def take_snapshot(self) -> None:
        """What a checkpoint must hold if Ctrl-C lands before the next update: the state now."""
        self._snapshot = self._rng_state(), {k: c.counters() for k, c in self.caches.items()}

    def forget_unfinished_batch(self) -> None:
        """After Ctrl-C: back to the last snapshot, so that --resume redoes the batch exactly."""
        if self._snapshot is None:
            return
        rng, counters = self._snapshot
        self._set_rng_state(rng)
        for k, c in counters.items():
            self.caches[k].rollback(c)

    def close(self) -> None:
        self.checkpoint()
        self.writer.flush()
        self.writer.close()

    def _resume(self) -> None:
        # Checkpoints written before rewards had modes were real-measurement runs, and before
        # learners were named, seq2seq ones.
        data = load_checkpoint(self.run_dir, self.identity,
                               defaults={"learner": "seq2seq", "reward": REAL, "real_fraction": None, "simulator": None,
                                         "warm_start": None, "objective": {"objective": "inference"}}, graph=self.graph)
        self.policy.load_state_dict(data["policy"])
        self.optimizer.load_state_dict(data["optimizer"])
        self.state = TrainState(**data["state"])
        for phase, key in ((REAL, "cache"), (SIMULATED, "sim_cache")):
            if phase in self.caches:
                self.caches[phase].load_state(data[key])
        self.env.measurer = self.cache.measurer
        self._set_rng_state(data["rng"])
        log.info("resumed %s at %d samples (%s reward)", self.run_dir, self.state.samples, self.state.phase)

    def _rng_state(self) -> dict[str, Any]:
        return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
                "sampler": self.sampler.get_state(), "env": self.env.np_random.bit_generator.state}

    def _set_rng_state(self, state: dict[str, Any]) -> None:
        random.setstate(state["python"])
        np.random.set_state(state["numpy"])
        torch.set_rng_state(state["torch"])
        self.sampler.set_state(state["sampler"])
        self.env.np_random.bit_generator.state = state["env"]
