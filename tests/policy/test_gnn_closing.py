"""A fine-tune with measured rewards ends with its closing rounds: its placements measured again
side by side, in interleaved rounds, judged with intervals and verdicts, the fastest of them written."""

from __future__ import annotations

import pytest
import torch

from placer.graph.load import load_graph
from placer.hardware import load_cluster
from placer.placement import Placement
from placer.policy.gnn import GraphPlacementPolicy, PolicyConfig
from placer.policy.gnn.episode import make_episode
from placer.policy.gnn.finetune import finetune
from placer.policy.gnn.learn import LearnConfig
from placer.policy.gnn.placing import place_episode
from placer.policy.gnn.rewards import MeasuredRewards
from testgraphs import branches
from testmeasurers import Machine, odd_heuristic, single

SAMPLES = 64
MS = 1e-3


@pytest.fixture(scope="module")
def episode():
    return odd_heuristic(make_episode(load_graph(branches(4, 2, width=128, batch=32)), load_cluster("4xa100-nvlink")))


def new_policy():
    torch.manual_seed(0)
    return GraphPlacementPolicy(PolicyConfig(hidden=16, layers=1, heads=1, rounds=2))


def run(episode, run_dir, machine, resume=False):
    policy = new_policy()
    result = finetune(policy, episode, run_dir, LearnConfig(), rewards=MeasuredRewards(episode, machine),
                      samples=SAMPLES, resume=resume, log=lambda text: None)
    return result, policy


def test_the_closing_rounds_measure_every_placement_interleaved_and_the_summary_judges_them(tmp_path, episode):
    heuristic = episode.heuristic_placement()
    machine = Machine(episode, lambda p: 2 * MS if single(p) else 1.5 * MS if p.nodes == heuristic.nodes else MS)
    result, policy = run(episode, tmp_path, machine)
    s = result.summary
    # training's pick, the policy's greedy and zero-shot placements, the heuristic's, every single device
    greedy, zero_shot = (place_episode(p, episode, keep_heuristic=False) for p in (policy, new_policy()))
    wanted = [greedy, zero_shot, heuristic] + [Placement.single_device(list(episode.graph.nodes), d)
                                               for d in episode.cluster.device_names]
    opened = [p.nodes for p in machine.opened]
    assert all(p.nodes in opened for p in wanted)
    assert len(opened) == len({tuple(sorted(p.items())) for p in opened})   # each distinct one once
    # interleaved: every round steps each placement once, in some order
    k = len(opened)
    assert len(machine.steps) % k == 0 and len(machine.steps) >= 10 * k
    assert all(sorted(machine.steps[i:i + k]) == list(range(k)) for i in range(0, len(machine.steps), k))
    side = s["side_by_side"]
    assert set(side["placements"]) == {"best_found", "greedy", "zero_shot", "heuristic"} | {
        f"single:{d}" for d in episode.cluster.device_names}
    for name, row in side["placements"].items():
        assert row["interval"]["n"] >= 10 and row["interval"]["low"] <= row["step_time"] <= row["interval"]["high"]
        judged = row["vs_best_single_device"]   # None: the best single device itself
        assert (judged is None) == (name == f"single:{s['best_single_device']}"), name
        assert judged is None or judged["verdict"] == ("tied" if name.startswith("single:") else "faster"), name
    assert s["confirmed_side_by_side"] and s["best_step_time"] == pytest.approx(MS)
    assert s["vs_best_single_device"]["verdict"] == "faster"
    assert s["vs_best_single_device"]["speedup"]["value"] == pytest.approx(2.0)
    assert s["vs_best_heuristic"]["verdict"] == "faster" and s["best_heuristic_step_time"] == pytest.approx(1.5 * MS)
    assert s["during_training"]["best_step_time"] is not None and side["note"] is None   # training's pick written
    written = Placement.load(tmp_path / "placement.json")
    assert written.extra["placer"]["measured_step_time"] == s["best_step_time"]


def test_a_placement_lucky_in_training_and_slow_in_the_closing_rounds_is_not_the_one_written(tmp_path, episode):
    machine = Machine(episode, lambda p: 2 * MS if single(p) else MS, luck=0.01, lucky_closing=1.0)
    result, _ = run(episode, tmp_path, machine)
    s = result.summary
    assert s["during_training"]["best_source"] == "sampled"   # the lucky figure: training's pick
    assert s["during_training"]["best_step_time"] == pytest.approx(0.01 * machine.simulated.measure(
        Placement(machine.devices, machine.lucky)).step_time)
    assert s["side_by_side"]["placements"]["best_found"]["step_time"] == pytest.approx(1.0)
    written = Placement.load(tmp_path / "placement.json")
    assert written.nodes != machine.lucky and written.extra["placer"]["measured_step_time"] == pytest.approx(MS)
    assert s["best_step_time"] == pytest.approx(MS) and s["best_source"] != "sampled"
    note = s["side_by_side"]["note"]
    assert note.startswith("placement.json: ") and "Not the best placement training found (sampled" in note
    assert "the fastest of many noisy figures" in note and "1000.00x [1000.00, 1000.00], faster" in note


def test_a_tie_in_the_closing_rounds_is_reported_as_tied_not_as_faster(tmp_path, episode):
    heuristic = episode.heuristic_placement()
    # the heuristic's placement 1% slower than the rest in every round: inside the 2% band
    machine = Machine(episode, lambda p: 2 * MS if single(p) else 1.01 * MS if p.nodes == heuristic.nodes else MS)
    s = run(episode, tmp_path, machine)[0].summary
    assert s["side_by_side"]["fastest"] == "best_found" and s["side_by_side"]["note"] is None
    judged = s["vs_best_heuristic"]
    assert judged["speedup"]["value"] == pytest.approx(1.01) and judged["verdict"] == "tied"
    assert s["vs_best_single_device"]["verdict"] == "faster"


def test_ctrl_c_in_the_closing_rounds_keeps_the_run_and_a_resume_measures_them_again(tmp_path, episode):
    closing = lambda p: 2 * MS if single(p) else MS  # noqa: E731
    try:
        cut, _ = run(episode, tmp_path, Machine(episode, closing, interrupt_at=25))
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C in the closing rounds escaped the fine-tune: its figures and files were not written")
    s = cut.summary
    assert cut.interrupted and cut.samples == SAMPLES and s["interrupted"] and not s["confirmed_side_by_side"]
    assert (tmp_path / "placement.json").exists()   # training's pick, its training figure, said so
    again = Machine(episode, closing)
    resumed, _ = run(episode, tmp_path, again, resume=True)
    s = resumed.summary
    assert not resumed.interrupted and resumed.samples == SAMPLES and s["confirmed_side_by_side"]
    assert again.measured == 1 and again.steps   # no training again: the greedy placement, then the closing rounds
    assert s["best_step_time"] == pytest.approx(MS)
