"""Fine-tuning the graph policy: a run cut short by Ctrl-C resumes to where an uninterrupted one
ends, and a placement that fails on the devices is a measured failure, not a crash."""

from __future__ import annotations

import copy
import dataclasses
import signal

import pytest
import torch

import placer.policy.gnn.finetune as finetune_module
from placer.costmodel.roofline import cluster_measurer
from placer.graph.load import load_graph
from placer.hardware import load_cluster
from placer.measure.measurement import OOM, Measurement
from placer.placement import Placement
from placer.policy.gnn import GraphPlacementPolicy, PolicyConfig
from placer.policy.gnn.episode import make_episode
from placer.policy.gnn.finetune import finetune, start_chains
from placer.policy.gnn.learn import LearnConfig
from placer.policy.gnn.placing import place_episode
from placer.policy.gnn.rewards import MeasuredRewards, SimulatedRewards
from testgraphs import branches

SAMPLES = 256   # 8 updates of 16 samples of 2 rounds
GREEDY = 4      # greedy chains (the start's, and the end's): from nothing and from the best heuristic's, 2 rounds each
HEURISTIC = 1   # the best heuristic's own placement, faster here than the untrained policy's: simulated once


@pytest.fixture(scope="module")
def episode():
    graph = load_graph(branches(4, 2, width=128, batch=32))
    return make_episode(graph, load_cluster("4xa100-nvlink"))


def run(episode, run_dir, rewards=None, resume=False, samples=SAMPLES, polish=0.0):
    torch.manual_seed(0)
    policy = GraphPlacementPolicy(PolicyConfig(hidden=16, layers=1, heads=1, rounds=2))
    return finetune(policy, episode, run_dir, LearnConfig(), rewards=rewards, samples=samples, resume=resume,
                    polish=polish, log=lambda text: None), policy


@pytest.mark.parametrize("extra, drawn", [(20, 20), (3, 0)], ids=["a smaller last batch", "too few for two"])
def test_a_fine_tune_never_draws_more_samples_than_asked(tmp_path, episode, extra, drawn):
    # the zero-shot start's greedy chains (4 rounds) and the heuristic's placement, 8 whole batches of
    # 16 placements x 2 rounds, then what is left: 10 placements for 20 samples, or nothing where not
    # even two placements (an advantage needs two) fit in 3; and the 4 rounds of the policy's greedy
    # chains at the end, all simulated
    start = GREEDY + HEURISTIC
    result, _ = run(episode, tmp_path / "run", samples=start + SAMPLES + GREEDY + extra)
    assert result.samples == start + SAMPLES + GREEDY + drawn
    assert [c["samples"] for c in result.summary["curve"][:2]] == [GREEDY, start]


def test_a_fine_tune_never_ends_slower_than_the_best_heuristic(tmp_path, episode):
    # no room to learn: the untrained policy's placements are slower than the heuristic's, which is
    # what the run hands over (as `placer place` and the per-graph learner's warm start do)
    result, _ = run(episode, tmp_path / "run", samples=GREEDY + HEURISTIC + GREEDY)
    summary = result.summary
    assert summary["zero_shot_step_time"] > summary["best_heuristic_step_time"]
    assert summary["best_step_time"] == summary["best_heuristic_step_time"]
    assert summary["best_source"] == f"the best list heuristic ({episode.best_name})"
    written = Placement.load(tmp_path / "run" / "placement.json")
    assert written.nodes == episode.heuristic_placement().nodes
    assert cluster_measurer(episode.cluster, episode.graph).measure(written).step_time == \
        pytest.approx(summary["best_heuristic_step_time"], rel=1e-9)


class CtrlCWhileScoring(SimulatedRewards):
    """Simulated rewards, with Ctrl-C pressed while the `n`-th batch is scored."""

    def __init__(self, episode, n: int) -> None:
        super().__init__(episode)
        self.batches, self.n = 0, n

    def step_times(self, group_assign):
        self.batches += 1
        if self.batches == self.n:
            signal.raise_signal(signal.SIGINT)
        return super().step_times(group_assign)


@pytest.mark.parametrize("polish", [0.0, 0.5], ids=["learning only", "then a polish"])
@pytest.mark.parametrize("when", ["while a batch is scored", "during an update"])
def test_a_fine_tune_cut_short_by_ctrl_c_resumes_to_where_an_uninterrupted_one_ends(tmp_path, episode, monkeypatch,
                                                                                    when, polish, ctrl_c_raises):
    whole, whole_policy = run(episode, tmp_path / "whole", polish=polish)
    if when == "while a batch is scored":
        rewards = CtrlCWhileScoring(episode, n=4)
    else:
        rewards, update, calls = None, finetune_module.update, []

        def pressed_during(*args):
            calls.append(1)
            if len(calls) == 4:
                signal.raise_signal(signal.SIGINT)   # held until the update and its bookkeeping are whole
            return update(*args)
        monkeypatch.setattr(finetune_module, "update", pressed_during)
    cut, _ = run(episode, tmp_path / "cut", rewards, polish=polish)
    assert cut.interrupted and 0 < cut.samples < SAMPLES and "polish" not in cut.summary
    monkeypatch.undo()
    resumed, resumed_policy = run(episode, tmp_path / "cut", resume=True)
    # learning alone leaves one sample: the heuristic's placement took one, a placement's 2 rounds count 2
    assert not resumed.interrupted and resumed.samples == whole.samples == (SAMPLES if polish else SAMPLES - 1)
    assert ("polish" in whole.summary) == bool(polish)
    for key in ("best_step_time", "best_source", "greedy_step_time", "curve", "polish"):
        assert resumed.summary.get(key) == whole.summary.get(key), key
    # the same weights: the optimizer's moments and the sampler's state went on from where they stopped
    for name, weights in whole_policy.state_dict().items():
        assert torch.equal(resumed_policy.state_dict()[name], weights), name
    assert Placement.load(tmp_path / "cut" / "placement.json").nodes == \
        Placement.load(tmp_path / "whole" / "placement.json").nodes


class SmallMemory:
    """A measurer of the roofline figures on devices where cuda:1 runs out of memory with more than 4
    of the 17 nodes (the best heuristic's placement puts 4 there, the policy's zero-shot one 5)."""

    def __init__(self, episode) -> None:
        self.simulated = cluster_measurer(episode.cluster, episode.graph)
        self.devices = self.simulated.devices
        self.failed = 0

    def measure(self, placement: Placement) -> Measurement:
        if placement.device_counts().get("cuda:1", 0) > 4:
            self.failed += 1
            return Measurement(ok=False, failure=OOM, reason="out of memory")
        return self.simulated.measure(placement)


def test_a_placement_that_fails_on_the_devices_costs_a_failure_and_the_run_goes_on(tmp_path, episode):
    measurer = SmallMemory(episode)
    result, _ = run(episode, tmp_path / "run", MeasuredRewards(episode, measurer))
    assert not result.interrupted and result.samples == SAMPLES and measurer.failed > 1
    s = result.summary
    assert s["reward"] == "real" and s["simulated"] is False
    assert s["samples_by_reward"] == {"real": SAMPLES, "simulated": 0}
    assert 0 < s["measured_placements"] <= SAMPLES + s["measured_besides_samples"]
    assert s["zero_shot_step_time"] is None and s["best_step_time"] is not None   # the zero-shot one failed
    placed = Placement.load(tmp_path / "run" / "placement.json")
    assert placed.device_counts().get("cuda:1", 0) <= 4
    assert placed.extra["placer"]["measured_step_time"] == s["best_step_time"] == \
        measurer.simulated.measure(placed).step_time


def test_fine_tuning_moves_the_policy_itself_to_a_faster_placement(tmp_path, episode):
    """Not only a lucky sample: the policy's own greedy placement after 256 samples is faster than
    its zero-shot one (where a learning rate of 0 leaves it as it was)."""
    results = {}
    for lr in (1e-2, 0.0):
        torch.manual_seed(0)
        policy = GraphPlacementPolicy(PolicyConfig(hidden=16, layers=1, heads=1, rounds=2))
        results[lr] = finetune(policy, episode, tmp_path / f"lr{lr}", LearnConfig(lr=lr), samples=SAMPLES,
                               log=lambda text: None)
    assert results[0.0].greedy_step_time == results[0.0].zero_shot_step_time
    assert results[1e-2].greedy_step_time < 0.9 * results[1e-2].zero_shot_step_time


def test_a_simulated_fine_tune_starts_from_the_zero_shot_placement_place_makes_and_counts_it(tmp_path, episode):
    """With sampled chains, the start is placer place's zero-shot placement (the same chains and
    seed), every round of every chain the start simulated counts, and the run stays within --samples."""
    chains = start_chains(SAMPLES, 2, "simulated", 192)
    assert chains == SAMPLES // 4 - 2 and start_chains(SAMPLES, 2, "real", 192) == 0
    torch.manual_seed(0)
    policy = GraphPlacementPolicy(PolicyConfig(hidden=16, layers=1, heads=1, rounds=2))
    placed = place_episode(copy.deepcopy(policy), episode, keep_heuristic=False, chains=chains).extra["placer"]
    result = finetune(policy, episode, tmp_path / "run", LearnConfig(), samples=SAMPLES, chains=chains,
                      log=lambda text: None)
    assert result.zero_shot_step_time == placed["simulated_step_time"]
    assert result.summary["curve"][0]["samples"] == (2 + chains) * 2 and result.samples <= SAMPLES
    assert result.best_step_time <= result.zero_shot_step_time


def test_the_polish_moves_from_the_best_placement_and_counts_every_placement_it_simulates(tmp_path, episode):
    """The last share of the samples polishes the best placement with local search's moves on the
    policy's groups: faster than the same run without it, every simulated placement counted, each
    move on the curve at the sample it was found, and the file holds the polished placement. (Without
    the best heuristic's placement to start from: on this graph these moves find nothing faster than it.)"""
    episode = dataclasses.replace(episode, best_assign=None)
    plain, _ = run(episode, tmp_path / "plain", polish=0.0)
    polished, _ = run(episode, tmp_path / "polished", polish=0.5)
    record = polished.summary["polish"]
    assert record["group_moves"] + record["node_moves"] > 0
    assert polished.best_step_time < plain.best_step_time
    assert record["to_s"] == polished.best_step_time < record["from_s"]
    assert polished.samples == SAMPLES and 0 < record["samples"] <= SAMPLES // 2
    samples = [c["samples"] for c in polished.summary["curve"]]
    times = [c["best_step_time"] for c in polished.summary["curve"]]
    assert samples == sorted(samples) and samples[-1] <= SAMPLES and times == sorted(times, reverse=True)
    assert polished.summary["curve"][-1]["best_step_time"] == polished.best_step_time
    placed = Placement.load(tmp_path / "polished" / "placement.json")
    assert cluster_measurer(episode.cluster, episode.graph).measure(placed).step_time == \
        pytest.approx(polished.best_step_time, rel=1e-9)


def test_the_polish_is_refused_in_one_line_where_it_cannot_run(tmp_path, episode):
    from placer.errors import PlacerError

    with pytest.raises(PlacerError, match="simulated rewards and --samples"):
        run(episode, tmp_path / "real", MeasuredRewards(episode, cluster_measurer(episode.cluster, episode.graph)),
            polish=0.5)


def test_a_polishing_fine_tune_resumes_to_the_samples_it_is_given_and_refuses_what_it_cannot(tmp_path, episode):
    """A finished polishing run resumed with more --samples learns and polishes to the new count
    (never past it); resumed with a time budget alone it is refused in one line; fewer --samples
    than the greedy chains at the end simulate are refused."""
    from placer.errors import PlacerError

    first, _ = run(episode, tmp_path / "run", polish=0.5)
    more, _ = run(episode, tmp_path / "run", resume=True, samples=SAMPLES + 64)
    assert first.samples == SAMPLES and more.samples == SAMPLES + 64
    assert more.summary["polish"]["samples"] >= first.summary["polish"]["samples"]
    assert more.best_step_time <= first.best_step_time
    with pytest.raises(PlacerError, match="resume it with --samples N"):
        torch.manual_seed(0)
        finetune(GraphPlacementPolicy(PolicyConfig(hidden=16, layers=1, heads=1, rounds=2)), episode,
                 tmp_path / "run", LearnConfig(), resume=True, budget_s=5.0, log=lambda text: None)
    with pytest.raises(PlacerError, match="fewer than the 4 placements"):
        run(episode, tmp_path / "tiny", samples=3)


@pytest.mark.parametrize("phase", ["polish", "greedy end"])
def test_a_fine_tune_cut_in_a_later_phase_resumes_to_where_an_uninterrupted_one_ends(tmp_path, episode, monkeypatch,
                                                                                     phase, ctrl_c_raises):
    """Ctrl-C in the phases after learning (the polish, the policy's greedy chains at the end): the
    resumed run draws the samples each phase had left, and ends as the uncut run does."""
    episode = dataclasses.replace(episode, best_assign=None)   # so that the polish finds moves
    whole, _ = run(episode, tmp_path / "whole", polish=0.5)
    # the polish is its only call; the greedy chains at the end are place_episode's second (the start's first)
    name, press_at = ("polish_best", 1) if phase == "polish" else ("place_episode", 2)
    original, calls = getattr(finetune_module, name), []

    def pressed(*args, **kwargs):
        calls.append(1)
        if len(calls) == press_at:
            signal.raise_signal(signal.SIGINT)   # held until the phase is whole where it defers Ctrl-C
        return original(*args, **kwargs)
    monkeypatch.setattr(finetune_module, name, pressed)
    cut, _ = run(episode, tmp_path / "cut", polish=0.5)
    assert cut.interrupted
    monkeypatch.undo()
    resumed, _ = run(episode, tmp_path / "cut", resume=True)
    assert not resumed.interrupted and resumed.samples == whole.samples == SAMPLES
    for key in ("best_step_time", "best_source", "greedy_step_time", "curve", "polish", "samples_by_phase"):
        assert resumed.summary.get(key) == whole.summary.get(key), key
