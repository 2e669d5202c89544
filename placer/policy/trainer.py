"""The training loop: sample placements, measure them, update the policy, log.

It reads top to bottom like the method (Mirhoseini et al., 2017): measure every single-device
placement (they compete with the learned ones); then repeat { sample K placements from the policy,
measure them, one REINFORCE update, measure the policy's own (greedy) placement, log } until
the sample count or the time budget is reached or the policy has settled; finally the best
placements and the single devices are measured again side by side. Each step is a method of
`TrainingSession`; what a finished run writes is in `placer.policy.run_summary`.

The reward of a sample is measured for real, simulated, or simulated first and measured for
real later (`placer.policy.phases`); the checkpoint records which phase a run is in, so that
`--resume` continues exactly on either side of the switch.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placer.env.placement_env import PlacementEnv
from placer.graph.grouping import Grouping
from placer.graph.opgraph import OpGraph
from placer.interrupts import deferred_interrupt
from placer.measure.measurement import Measurer, OpensPlacements
from placer.placement import Placement
from placer.policy.hparams import Hyperparameters
from placer.policy.phases import DEFAULT_REAL_FRACTION, REAL, SIMULATED, RewardPlan
from placer.policy.run_state import TrainState
from placer.policy.run_summary import confirm_side_by_side, log_result, write_outputs
from placer.policy.seq2seq import Seq2SeqPolicy
from placer.policy.session import RewardSources, TrainingSession
from placer.policy.summary_file import RunSummary
from placer.policy.warm_start import WarmStart

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """What a run produced: the best placement and how it compares with single devices."""

    placement: Placement
    summary: RunSummary
    interrupted: bool
    policy: Seq2SeqPolicy | None = None
    env: PlacementEnv | None = None


def train(graph: OpGraph, measurer: Measurer | None, grouping: Grouping, run_dir: str | Path,
          hp: Hyperparameters = Hyperparameters(), *, samples: int | None = None, budget_s: float | None = None,
          seed: int = 0, resume: bool = False, progress: bool = False, run_info: dict[str, Any] | None = None,
          reward: str = REAL, simulator: Measurer | None = None, confirm: Measurer | None = None,
          real_fraction: float = DEFAULT_REAL_FRACTION, warm_start: WarmStart | None = None,
          counts_evaluations: bool = False) -> TrainResult:
    """Learn a placement of `graph` on the devices; stop after `samples` sampled placements
    (whole updates) or `budget_s` seconds of this session, whichever comes first.

    `reward` says where the samples' rewards come from (see `placer.policy.phases`): "real" uses
    `measurer`, "simulated" uses `simulator`, "hybrid" uses `simulator` and then `measurer` for
    the last `real_fraction` of the samples or budget. With `confirm`, the fastest placements and
    every single device are measured again side by side at the end (`placer.policy.run_summary`);
    a simulated reward needs it, so that what a run reports is never a simulated figure.
    With `warm_start` (whose grouping must be `grouping`), the policy first imitates that
    placement (`placer.policy.warm_start`), then learns from there. With `counts_evaluations` (a
    described cluster), every placement it simulates counts in `samples`, the single devices and
    the greedy placements too, and it never goes past them: it stops before an update whose
    samples and greedy placement would not fit, and skips what does not fit."""
    if samples is None and budget_s is None:
        raise ValueError("give samples or budget_s")
    plan = RewardPlan(reward, real_fraction)
    sources = RewardSources(plan, real=measurer, simulated=simulator, confirm=confirm)
    session = TrainingSession(graph, grouping, Path(run_dir), hp, sources, seed=seed, resume=resume,
                              warm_start=warm_start, run_info={"samples": samples, "budget_s": budget_s,
                                                               **(run_info or {})},
                              counts_evaluations=counts_evaluations)
    state = session.state
    budget = Budget(samples, budget_s, plan, hp.samples_per_update, progress, state, counts_evaluations)
    interrupted, cut = False, None   # cut: why the loop ended before its budget, when something cut it
    try:
        if not state.single_device and budget.fits(state, len(session.devices)):
            singles = session.measure_single_devices()
            session.enter_single_devices(singles)
            # The baseline starts from what a user has today.
            state.baseline = sum(session.env.reward(m) for m in singles) / len(singles)
        # What Ctrl-C returns to: retaken after every update and at the hybrid switch.
        session.take_snapshot()
        while True:
            if state.history and (state.greedy is None or state.greedy["samples"] != state.samples):
                session.measure_greedy()   # a run stopped while it measured its policy's placement
            if budget.time_to_switch(state):
                session.switch_to_real()
                budget.real_started = budget.elapsed()
            if budget.spent(state):
                break
            actions = session.sample(budget.batch(state))     # 1. sample K placements from the policy
            measurements = session.measure(actions)          # 2. measure them (each distinct one once)
            with deferred_interrupt():
                stats = session.update(actions, measurements)   # 3. one REINFORCE update
                session.refine_on_corrected_simulator()      # (hybrid, real phase: the corrected simulator)
                state.wall_time_s = budget.wall_time()
                session.take_snapshot()                      # the batch is whole: nothing to undo from here
                session.measure_greedy()                     # 4. the policy's own placement, as it is now
                session.take_snapshot()
            session.log(stats)                               # 5. log, checkpoint now and then
            session.checkpoint_if_due()
            budget.show(state)
            if state.settled() and budget.may_stop_early(state):
                state.stopped = "converged"   # more samples would only repeat placements measured already
                break
        if (state.greedy is None or state.greedy["samples"] != state.samples) and budget.fits(state, 1):
            session.measure_greedy()   # the policy as it ends: the placement it would give
    except KeyboardInterrupt:
        interrupted, cut = True, "interrupted (Ctrl-C); --resume continues"
        session.forget_unfinished_batch()
        log.warning("interrupted: saving the run at %d samples", state.samples)
    except Exception:
        # A measurer that cannot go on (no worker left): the checkpoint holds the last whole update,
        # so that --resume continues exactly.
        cut = "stopped by an error"
        session.forget_unfinished_batch()
        raise
    finally:
        budget.close(state, cut)
        session.close()

    # On a described cluster `confirm` is the training's simulator: it simulates again placements already
    # counted, the figures a cache would give, so they do not count (`counts_evaluations`). After Ctrl-C
    # nothing is measured again on the devices (a minute and more): the resumed run confirms at its end.
    quick = not isinstance(confirm, OpensPlacements)
    confirmed = confirm_side_by_side(confirm, session) \
        if confirm is not None and state.single_device and (quick or not interrupted) else None
    placement, summary = write_outputs(session, interrupted, confirmed)
    log_result(session.run_dir, summary)
    return TrainResult(placement, summary, interrupted, session.policy, session.env)


class Budget:
    """When the loop stops (sample count or seconds of this session), when hybrid turns to real
    measurement, and the progress bar."""

    def __init__(self, samples: int | None, seconds: float | None, plan: RewardPlan, per_update: int,
                 progress: bool, state: TrainState, counts_evaluations: bool = False) -> None:
        from tqdm import tqdm

        self.samples, self.seconds, self.plan = samples, seconds, plan
        self.per_update, self.counts_evaluations = per_update, counts_evaluations
        self.switch_at = plan.switch_sample(samples, per_update) if samples is not None else None
        self.switch_after_s = plan.switch_time(seconds) if samples is None else None
        self.started, self.wall_before = time.monotonic(), state.wall_time_s
        self.real_started: float | None = None   # hybrid: seconds into this session when the real phase began
        by_time = samples is None
        self.bar = tqdm(total=int(seconds) if by_time else samples, initial=0 if by_time else state.samples,
                        unit="sample", disable=not progress, dynamic_ncols=True, desc="training",
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}/" + f"{int(seconds)}s" + "{postfix}"
                        if by_time else None)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def wall_time(self) -> float:
        """Training time over all sessions of the run."""
        return self.wall_before + self.elapsed()

    def fits(self, state: TrainState, n: int) -> bool:
        """`n` more simulated placements stay within the samples (always, unless every one counts)."""
        return not self.counts_evaluations or self.samples is None or state.samples + n <= self.samples

    def batch(self, state: TrainState) -> int:
        """The next update's samples: the samples per update, or what is left of --samples where
        that is fewer, so that the learner never draws past its share (the plans after it get theirs)."""
        if self.samples is None:
            return self.per_update
        return max(1, min(self.per_update, self.samples - state.samples))

    def spent(self, state: TrainState) -> bool:
        """The budget is used up, or a hybrid run's real phase has had its share of it: the real
        phase explores (it never settles), so it gets `real_fraction` of the samples or seconds
        however early the simulated phase settled."""
        if (self.samples is not None and state.samples >= self.samples) or \
                (self.seconds is not None and self.elapsed() >= self.seconds):
            return True
        if not self.fits(state, self.per_update + 1):   # the next batch and its greedy placement
            return True
        if self.plan.reward != "hybrid" or state.phase != REAL:
            return False
        if self.samples is not None:
            return state.phase_samples.get(REAL, 0) >= self.samples - self.switch_at
        return self.real_started is not None and \
            self.elapsed() - self.real_started >= self.seconds * self.plan.real_fraction

    def time_to_switch(self, state: TrainState) -> bool:
        """Hybrid turns to real measurement at its share of the budget, or sooner once the policy
        has settled in the simulator: more simulated samples would only repeat themselves."""
        if state.phase != SIMULATED or self.plan.reward != "hybrid":
            return False
        return ((self.switch_at is not None and state.samples >= self.switch_at)
                or (self.switch_after_s is not None and self.elapsed() >= self.switch_after_s) or state.settled())

    def may_stop_early(self, state: TrainState) -> bool:
        """A settled hybrid run still has its real phase to do."""
        return not (self.plan.reward == "hybrid" and state.phase == SIMULATED)

    def show(self, state: TrainState) -> None:
        best = state.best["step_time"] if state.best else None
        label = "sim best" if state.phase == SIMULATED else "best"
        self.bar.set_postfix({"samples": state.samples, label: f"{best * 1e3:.2f}ms" if best is not None else "-"})
        if self.samples is not None:
            self.bar.update(state.samples - self.bar.n)
        else:
            self.bar.update(max(0, min(int(self.elapsed()), int(self.seconds)) - self.bar.n))

    def stop_reason(self, state: TrainState) -> str | None:
        """Why the loop ended short of its samples or seconds, in words; None when it used them all."""
        if self.samples is not None and state.samples >= self.samples:
            return None
        if self.samples is None and self.elapsed() >= self.seconds:
            return None
        if self.seconds is not None and self.elapsed() >= self.seconds:
            return f"its {self.seconds:g} s were spent"
        if state.stopped == "converged":
            return "the policy converged: more samples would repeat placements measured already"
        if not self.fits(state, self.per_update + 1):
            return (f"the next update's {self.per_update} samples and its greedy placement do not fit in the "
                    f"{self.samples - state.samples} left")
        if self.plan.reward == "hybrid" and state.phase == REAL:
            return "the simulated phase converged early and the real phase had its share"
        return None

    def close(self, state: TrainState, cut: str | None = None) -> None:
        """The bar at where the run ended: 100%, or it says why it stopped before (`cut`, else
        `stop_reason`)."""
        self.show(state)
        why = cut or self.stop_reason(state)
        if why and self.bar.n < self.bar.total:
            self.bar.set_description_str(f"training stopped early ({why})", refresh=False)
        self.bar.close()
