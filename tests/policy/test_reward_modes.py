"""`--reward simulated|hybrid`: learning in the simulator, switching to real measurement, and
reporting only real measurements whatever the reward."""

from __future__ import annotations

import math
import itertools
import json

import pytest
import torch

from placer.errors import PlacerError
from placer.graph.grouping import group_graph
from placer.graph.load import load_graph
from placer.measure.measurer import MeasureProtocol, RealMeasurer
from placer.costmodel.simulator import AnalyticCostModel, SimulatedMeasurer
from placer.placement import Placement
from placer.policy.checkpoint import FILENAME
from placer.policy.hparams import Hyperparameters
from placer.policy.phases import RewardPlan
from placer.policy.trainer import train

HP = Hyperparameters(hidden_size=32, lr=0.01, samples_per_update=4)
DEVICES = ["cpu:0", "cpu:1"]


class Recording:
    """A measurer that remembers every placement it measured and every figure it returned."""

    def __init__(self, inner, interrupt_at: int | None = None) -> None:
        self.inner, self.devices = inner, inner.devices
        self.protocol = getattr(inner, "protocol", None)
        self.placements: list[Placement] = []
        self.step_times: list[float] = []
        self.interrupt_at = interrupt_at

    def measure(self, placement):
        if self.interrupt_at is not None and len(self.placements) + 1 == self.interrupt_at:
            raise KeyboardInterrupt   # as if Ctrl-C landed inside this measurement
        self.placements.append(placement)
        m = self.inner.measure(placement)
        if m.ok:
            self.step_times.append(m.step_time)
        return m


@pytest.fixture(scope="module")
def four_branches(make_branches_module):
    graph = load_graph(make_branches_module(4, 2))
    grouping = group_graph(graph, 4, 2)
    sim = SimulatedMeasurer(graph, DEVICES)
    times = {a: sim.measure(grouping.expand(a, DEVICES)).step_time for a in itertools.product([0, 1], repeat=4)}
    return graph, grouping, min(times.values())


@pytest.fixture(scope="module")
def make_branches_module():
    from testgraphs import branches

    return branches


def real_measurer(graph) -> RealMeasurer:
    return RealMeasurer(graph, DEVICES, protocol=MeasureProtocol(warmup=0, repeats=1))


def test_simulated_reward_learns_in_the_simulator_and_reports_only_real_measurements(four_branches, tmp_path):
    graph, grouping, optimum = four_branches
    simulator = Recording(SimulatedMeasurer(graph, DEVICES))
    confirm = Recording(real_measurer(graph))
    result = train(graph, None, grouping, tmp_path, HP, samples=120, seed=0, reward="simulated",
                   simulator=simulator, confirm=confirm)
    s = result.summary
    # It learned: the simulator's optimum (found by brute force) was reached during training.
    assert s["simulated_phase"]["simulated_best_step_time"] == pytest.approx(optimum)
    assert s["samples_by_reward"] == {"simulated": s["samples"], "real": 0} and s["during_training"]["reward"] == "simulated"
    assert s["samples"] == 120 or s["stopped_early"] == "converged"
    # Training measured nothing for real: every sample went to the simulator ...
    assert len(simulator.placements) >= 2 and len(confirm.placements) <= 2 + 5
    # ... and every reported figure is one the real measurer returned at the end.
    assert s["confirmed_side_by_side"] and s["measurer"]["kind"] == "Recording"
    assert s["best_step_time"] in confirm.step_times
    assert all(t in confirm.step_times for t in s["single_device_step_times"].values())
    placement = json.loads((tmp_path / "placement.json").read_text())
    assert placement["measurement"]["protocol"]["repeats"] == 1          # the real protocol's record
    assert "kind" not in placement["measurement"]["protocol"]            # not the simulator's
    assert all(c["training_reward"] == "simulated" for c in s["confirmed_candidates"])


def test_simulated_figures_are_labelled_as_such_in_tensorboard(four_branches, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    graph, grouping, _ = four_branches
    train(graph, None, grouping, tmp_path, HP, samples=8, seed=0, reward="simulated",
          simulator=SimulatedMeasurer(graph, DEVICES), confirm=real_measurer(graph))
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"charts/simulated_step_time_sampled", "charts/simulated_best_step_time",
            "charts/simulated_reward_mean", "result/speedup_vs_best_single_device"} <= scalars
    assert not {"charts/step_time_sampled", "charts/best_step_time", "charts/reward_mean"} & scalars


def test_counting_evaluations_every_simulated_placement_counts_and_the_samples_hold(four_branches, tmp_path,
                                                                                    monkeypatch):
    """A described cluster's run: the single devices and the greedy placements count in the samples
    besides the sampled batches, once each (one the cache answers was not simulated again), and
    the run stops where the next batch with its greedy placement would go past --samples."""
    from placer.policy.session import TrainingSession

    graph, grouping, _ = four_branches
    simulator = Recording(SimulatedMeasurer(graph, DEVICES))
    besides = []   # placements simulated by the greedy and single-device measurements
    for name in ("measure_greedy", "measure_single_devices"):
        def spied(self, *args, _method=getattr(TrainingSession, name)):
            before = len(simulator.placements)
            out = _method(self, *args)
            besides.append(len(simulator.placements) - before)
            return out
        monkeypatch.setattr(TrainingSession, name, spied)
    s = train(graph, None, grouping, tmp_path, HP, samples=21, reward="simulated", simulator=simulator,
              confirm=SimulatedMeasurer(graph, DEVICES), counts_evaluations=True).summary
    assert sum(besides) > len(DEVICES)   # the single devices, and at least one new greedy placement
    assert s["samples"] == HP.samples_per_update * s["updates"] + sum(besides) == s["samples_by_reward"]["simulated"]
    assert len(simulator.placements) <= s["samples"] <= 21
    # one sample: the policy's own placement (the single devices and an update do not fit)
    one = Recording(SimulatedMeasurer(graph, DEVICES))
    s = train(graph, None, grouping, tmp_path / "one", HP, samples=1, reward="simulated", simulator=one,
              confirm=SimulatedMeasurer(graph, DEVICES), counts_evaluations=True).summary
    assert len(one.placements) == s["samples"] == 1 and s["updates"] == 0 and s["single_device_step_times"] == {}


def hybrid(graph, grouping, run_dir, samples, real, **kw):
    """A hybrid run whose "real" phase is a second, deterministic simulator on another scale
    (3x slower devices), so that runs can be compared bit for bit."""
    return train(graph, real, grouping, run_dir, HP, samples=samples, seed=7, reward="hybrid",
                 simulator=SimulatedMeasurer(graph, DEVICES), real_fraction=0.25,
                 confirm=SimulatedMeasurer(graph, DEVICES, slow_costs()), **kw)


def slow_costs() -> AnalyticCostModel:
    return AnalyticCostModel(DEVICES, speeds={d: 2e10 / 3 for d in DEVICES})


def test_hybrid_switches_to_real_measurement_at_its_share_of_the_samples(four_branches, tmp_path):
    graph, grouping, _ = four_branches
    real = Recording(SimulatedMeasurer(graph, DEVICES, slow_costs()))
    result = hybrid(graph, grouping, tmp_path, 32, real)
    state = torch.load(tmp_path / FILENAME, weights_only=False)["state"]
    assert RewardPlan("hybrid", 0.25).switch_sample(32, 4) == 24 and state["switched_at"] == 24
    assert [h["phase"] for h in state["history"]] == ["simulated"] * 6 + ["real"] * 2
    assert result.summary["samples_by_reward"] == {"simulated": 24, "real": 8}
    # The real measurer saw the two single devices at the switch, then only the last 8 samples
    # (fewer when the policy repeats a placement, which the cache answers).
    singles = [p for p in real.placements[:2]]
    assert [set(p.nodes.values()) for p in singles] == [{"cpu:0"}, {"cpu:1"}]
    assert 2 < len(real.placements) <= 2 + 8
    # The baseline restarted on the real scale: the first real update's baseline is its batch mean.
    first_real = state["history"][6]
    assert first_real["baseline"] == pytest.approx(first_real["reward_mean"], rel=1e-6)
    assert state["simulated"]["samples"] == 24 and state["simulated"]["best"]["source"].endswith("simulated")


def _same_run(a_dir, b_dir) -> None:
    a = torch.load(a_dir / FILENAME, weights_only=False)
    b = torch.load(b_dir / FILENAME, weights_only=False)
    assert a["state"]["losses"] == b["state"]["losses"] and a["state"]["history"] == b["state"]["history"]
    assert a["state"]["switched_at"] == b["state"]["switched_at"] and a["state"]["phase"] == b["state"]["phase"]
    assert a["state"]["best"] == b["state"]["best"] and a["state"]["baseline"] == b["state"]["baseline"]
    assert all(torch.equal(a["policy"][k], b["policy"][k]) for k in a["policy"])
    assert a["cache"] == b["cache"] and a["sim_cache"] == b["sim_cache"]


def hybrid_cut(graph, grouping, run_dir, *, sim_cut=None, real_cut=None):
    """A hybrid run of 32 samples stopped by Ctrl-C at the given measurement of either measurer."""
    sim = Recording(SimulatedMeasurer(graph, DEVICES), interrupt_at=sim_cut)
    real = Recording(SimulatedMeasurer(graph, DEVICES, slow_costs()), interrupt_at=real_cut)
    return train(graph, real, grouping, run_dir, HP, samples=32, seed=7, reward="hybrid", simulator=sim,
                 real_fraction=0.25, confirm=SimulatedMeasurer(graph, DEVICES, slow_costs()))


@pytest.mark.parametrize("cut, phase, samples", [
    ({"sim_cut": 8}, "simulated", range(0, 24)),     # inside the simulated phase
    ({"real_cut": 2}, "simulated", [24]),            # while measuring the real single devices
    ({"real_cut": 5}, "real", [24, 28]),             # inside the real phase
])
def test_hybrid_interrupted_before_during_or_after_the_switch_resumes_exactly(four_branches, tmp_path, cut,
                                                                               phase, samples):
    """Ctrl-C anywhere, then --resume with the same options: the same run as one without a stop.
    (The split is of the sample count asked for: resume with the same --samples.)"""
    graph, grouping, _ = four_branches
    whole = hybrid(graph, grouping, tmp_path / "whole", 32, SimulatedMeasurer(graph, DEVICES, slow_costs()))
    stopped = hybrid_cut(graph, grouping, tmp_path / "cut", **cut)
    assert stopped.interrupted and stopped.summary["samples"] in samples
    assert torch.load(tmp_path / "cut" / FILENAME, weights_only=False)["state"]["phase"] == phase
    resumed = hybrid(graph, grouping, tmp_path / "cut", 32, SimulatedMeasurer(graph, DEVICES, slow_costs()),
                     resume=True)
    _same_run(tmp_path / "whole", tmp_path / "cut")
    assert whole.placement.nodes == resumed.placement.nodes and not resumed.interrupted


def test_resuming_with_another_reward_is_refused(four_branches, tmp_path):
    graph, grouping, _ = four_branches
    hybrid(graph, grouping, tmp_path, 8, SimulatedMeasurer(graph, DEVICES, slow_costs()))
    with pytest.raises(PlacerError, match="different reward"):
        train(graph, SimulatedMeasurer(graph, DEVICES), grouping, tmp_path, HP, samples=16, seed=7, resume=True)


def test_the_reward_plan_splits_samples_in_whole_updates_and_refuses_bad_fractions():
    plan = RewardPlan("hybrid", 0.25)
    assert plan.switch_sample(32, 4) == 24 and plan.switch_sample(10, 4) == 4 and plan.switch_sample(3, 4) == 0
    assert plan.switch_time(240.0) == pytest.approx(180.0)
    assert RewardPlan("real").switch_sample(32, 4) is None and RewardPlan("simulated").first_phase == "simulated"
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(PlacerError, match="real-fraction"):
            RewardPlan("hybrid", bad)
    with pytest.raises(PlacerError, match="unknown reward"):
        RewardPlan("guess")


def test_the_real_phase_explores_and_fits_the_simulators_error(four_branches, tmp_path):
    """Hybrid's real phase: every sample differs from the policy's own draw (a converged policy
    would otherwise measure one placement again and again), each real sample is set against the
    simulator's prediction in TensorBoard, and the residual fit recovers the real devices' scale
    (3x slower than the simulator thinks)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    graph, grouping, _ = four_branches
    real = Recording(SimulatedMeasurer(graph, DEVICES, slow_costs()))
    hybrid(graph, grouping, tmp_path, 48, real)
    state = torch.load(tmp_path / FILENAME, weights_only=False)["state"]
    fit = state["sim_to_real"]
    assert len(fit["points"]) >= 3
    events = EventAccumulator(str(tmp_path)).Reload()
    errors = [e.value for e in events.Scalars("charts/sim_error")]
    assert errors == pytest.approx([s / m - 1 for s, m, _ in fit["points"]], abs=1e-6)
    assert all(-0.67 < e < -0.3 for e in errors)   # the simulator thinks the devices 3x faster (links aside)
    from placer.policy.sim_to_real import ResidualFit

    raw, corrected = ResidualFit(**fit).relative_errors()
    assert corrected < 0.05 < raw
    assert len(events.Scalars("charts/sim_error_corrected")) == len(errors)
    # every real sample was moved off the policy's draw: more distinct placements than a converged policy gives
    assert len({tuple(sorted(p.nodes.items())) for p in real.placements}) >= 6


def test_exploring_moves_every_sample_and_nothing_without_a_rate():
    from placer.policy.sim_to_real import explore

    actions = torch.zeros((64, 10), dtype=torch.long)
    moved = explore(actions, 3, 0.05, torch.Generator().manual_seed(0))
    assert (moved != actions).any(dim=1).all() and moved.max() <= 2
    assert (moved != actions).float().mean() < 0.2   # a little, not a random placement
    assert torch.equal(explore(actions, 3, 0.0, torch.Generator().manual_seed(0)), actions)
    again = explore(actions, 3, 0.05, torch.Generator().manual_seed(0))
    assert torch.equal(moved, again)


def test_the_residual_fit_recovers_a_slowdown_that_grows_with_the_split():
    import numpy as np

    from placer.policy.sim_to_real import ResidualFit

    rng = np.random.default_rng(0)
    fit = ResidualFit()
    for _ in range(40):
        x, sim = rng.uniform(0, 0.5), rng.uniform(0.05, 0.2)
        fit.add(sim, sim * math.exp(0.1 + 0.6 * x), x)
    fit.fit()
    assert fit.coef == pytest.approx([0.1, 0.6], abs=1e-9)
    raw, corrected = fit.relative_errors()
    assert raw > 0.1 and corrected < 1e-9


def test_the_real_phase_gets_its_share_of_the_budget_however_early_the_switch():
    """It explores, so it never settles: it ends after real_fraction of the samples or seconds."""
    from placer.policy.run_state import TrainState
    from placer.policy.trainer import Budget

    plan = RewardPlan("hybrid", 0.25)
    state = TrainState(phase="real", samples=12, switched_at=4, phase_samples={"simulated": 4, "real": 4})
    by_samples = Budget(32, None, plan, 4, False, state)
    assert not by_samples.spent(state)
    state.phase_samples["real"] = 8                       # a quarter of 32, though only 16 were drawn
    assert by_samples.spent(state)
    by_time = Budget(None, 100.0, plan, 4, False, state)
    by_time.real_started = by_time.elapsed() - 20.0
    assert not by_time.spent(state)
    by_time.real_started = by_time.elapsed() - 26.0
    assert by_time.spent(state)
    by_samples.close(state)
    by_time.close(state)
