"""`placer train --policy pretrained|FILE`: the graph policy fine-tuned on one graph and cluster."""

from __future__ import annotations

import json
import socket

import onnx
import pytest
import torch

from placer.cli import main
from placer.costmodel.roofline import cluster_measurer
from placer.hardware import load_cluster
from placer.hardware.cluster import LOCAL_SOURCE
from placer.kernels.loading import load_graph
from placer.measure.paired_measurer import PairedMeasurer
from placer.placement import Placement
from placer.policy.gnn import GraphPlacementPolicy, PolicyConfig, save_policy
from testgraphs import branches
from testmeasurers import Machine, odd_heuristic, single

from .test_cluster_cli import BOX


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "branches.onnx"
    onnx.save(branches(4, 2, width=128, batch=32), path)
    return path


@pytest.fixture
def policy_file(tmp_path):
    torch.manual_seed(0)
    return save_policy(GraphPlacementPolicy(PolicyConfig(hidden=16, layers=1, heads=1, rounds=2)),
                       tmp_path / "start.pt")


def test_fine_tuning_writes_a_placement_no_slower_than_zero_shot(tmp_path, model, policy_file, capsys):
    run = tmp_path / "run"
    assert main(["train", "--graph", str(model), "--cluster", "4xa100-nvlink", "--policy", str(policy_file),
                 "--samples", "96", "--run-dir", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    # the zero-shot start as placer place makes it (22 sampled chains here) counts: 48 samples of 96
    assert summary["curve"][0]["samples"] == 48 and 90 <= summary["samples"] <= 96
    assert summary["best_step_time"] <= summary["zero_shot_step_time"]
    placement = Placement.load(run / "placement.json")
    graph = load_graph(str(model))
    measured = cluster_measurer(load_cluster("4xa100-nvlink"), graph).measure(placement)
    assert measured.step_time == pytest.approx(summary["best_step_time"], rel=1e-9)   # the file holds the best
    assert placement.extra["placer"]["source"].startswith("graph policy, fine-tuned")
    assert (run / "policy.pt").exists() and "best list heuristic" in capsys.readouterr().out
    # by default three quarters of what the start left polish the best placement: of 96, the start's
    # 48 and the greedy chains' 4 at the end leave 44, of which REINFORCE may take 11 (a batch of 5
    # placements x 2 rounds: 10) and the polish the other 34
    assert summary["polish"]["budget"] == 34 and summary["polish"]["samples"] <= 34 and summary["samples"] == 96


def test_fine_tuning_refuses_what_it_cannot_do_in_one_line(tmp_path, model, policy_file, capsys):
    base = ["train", "--graph", str(model), "--samples", "10", "--run-dir", str(tmp_path / "r")]
    assert main(base + ["--policy", str(policy_file)]) == 2
    assert "--cluster" in capsys.readouterr().err
    assert main(base + ["--policy", str(policy_file), "--cluster", "2xt4-pcie", "--polish", "1.5"]) == 2
    assert "--polish must be a share" in capsys.readouterr().err
    assert main(["train", "--graph", str(model), "--budget", "5s", "--run-dir", str(tmp_path / "r2"),
                 "--policy", str(policy_file), "--cluster", "2xt4-pcie", "--polish", "0.5"]) == 2
    assert "--polish spends a share of a sample count: add --samples N" in capsys.readouterr().err
    assert main(base + ["--policy", "lstm", "--cluster", "2xt4-pcie"]) == 2
    assert "seq2seq, pretrained or a graph policy file" in capsys.readouterr().err
    assert main(base + ["--policy", str(policy_file), "--cluster", "2xt4-pcie", "--reward", "hybrid"]) == 2
    assert "--reward simulated (its default) or real" in capsys.readouterr().err


def test_real_rewards_on_hardware_this_machine_is_not_are_refused_in_one_line(tmp_path, model, policy_file, capsys):
    assert main(["train", "--graph", str(model), "--samples", "10", "--run-dir", str(tmp_path / "r"), "--policy",
                 str(policy_file), "--cluster", "2xt4-pcie", "--reward", "real"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--reward real runs placements for real" in err, err
    assert "hardware this machine does not have" in err and "describe-local" in err


@pytest.fixture
def this_machine(tmp_path):
    """This machine's two virtual CPUs as a cluster file, marked as `placer cluster describe-local`
    marks the file it writes here (its figures a datasheet's, not measured: quicker)."""
    path = tmp_path / "here.toml"
    two_cpus = BOX.replace("cuda:0", "cpu:1").replace('model = "tesla-k40"', 'model = "xeon-e5-2699-v3"')
    path.write_text(f'source = "{LOCAL_SOURCE} on {socket.gethostname() or "localhost"}, 2025-01-01T00:00:00Z"\n'
                    + two_cpus)
    assert load_cluster(str(path)).is_this_machine()
    return path


def test_real_rewards_on_this_machines_cluster_are_measured_on_its_devices(tmp_path, model, policy_file,
                                                                           this_machine, capsys, monkeypatch):
    measured = []
    measure_many = PairedMeasurer.measure_many
    monkeypatch.setattr(PairedMeasurer, "measure_many", lambda self, ps: measured.extend(ps) or measure_many(self, ps))
    run = tmp_path / "run"
    assert main(["train", "--graph", str(model), "--cluster", str(this_machine), "--policy", str(policy_file),
                 "--reward", "real", "--samples", "8", "--warmup", "0", "--run-dir", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["reward"] == "real" and summary["simulated"] is False
    assert summary["samples_by_reward"] == {"real": summary["samples"], "simulated": 0}
    # every distinct sample, the zero-shot, the heuristic's and the greedy placement, on the devices
    assert len(measured) == summary["measured_placements"] > 3
    placement = Placement.load(run / "placement.json")
    assert placement.extra["placer"]["measured_step_time"] == summary["best_step_time"]
    out = capsys.readouterr().out
    assert "rewards measured" in out and "ms measured" in out and "simulated" not in out


def test_a_resume_with_other_settings_is_refused_in_one_line(tmp_path, model, policy_file, this_machine, capsys,
                                                             monkeypatch):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))   # nothing of a test in the user's cache
    run = tmp_path / "run"
    same = ["train", "--graph", str(model), "--samples", "32", "--run-dir", str(run), "--cluster", str(this_machine),
            "--policy", str(policy_file)]
    assert main(same) == 0
    other_policy = save_policy(GraphPlacementPolicy(PolicyConfig(hidden=16, layers=1, heads=1, rounds=2)),
                               tmp_path / "other.pt")
    other_graph = tmp_path / "other.onnx"
    onnx.save(branches(2, 2, width=128, batch=32), other_graph)
    for change, expected in ((["--cluster", "2xt4-pcie"], "different cluster"),
                             (["--policy", str(other_policy)], "different policy"),
                             (["--graph", str(other_graph)], "different graph"),
                             (["--reward", "real"], "different reward"),
                             (["--seed", "1"], "different seed"),
                             (["--policy", "seq2seq", "--reward", "simulated", "--cost-model", "analytic"],
                              "different learner")):
        capsys.readouterr()
        assert main(same + change + ["--resume"]) == 2, change
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and expected in err, err


def test_real_rewards_end_with_the_closing_rounds_printed_with_intervals_and_verdicts(tmp_path, model, policy_file,
                                                                                     this_machine, capsys,
                                                                                     monkeypatch):
    import placer.jobs.train as job
    import placer.policy.gnn.episode as episodes

    make_episode = episodes.make_episode
    monkeypatch.setattr(episodes, "make_episode", lambda *a, **k: odd_heuristic(make_episode(*a, **k)))
    heuristic = []

    def closing(placement):   # a single device 2 ms, the heuristic's placement 1% slower than the policy's 1 ms
        return 2e-3 if single(placement) else 1.01e-3 if placement.nodes in heuristic else 1e-3

    def fake(settings, graph, episode, run_dir):
        heuristic.append(episode.heuristic_placement().nodes)
        return Machine(episode, closing)
    monkeypatch.setattr(job, "_measured", fake)
    run = tmp_path / "run"
    assert main(["train", "--graph", str(model), "--cluster", str(this_machine), "--policy", str(policy_file),
                 "--reward", "real", "--samples", "16", "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert "measured again side by side at the end (10 interleaved rounds, 95% intervals" in out
    rows = {line.strip().split("  ")[0]: line for line in out.splitlines() if line.startswith("  ")}
    for label in ("best placement found", "fine-tuned (greedy)", "zero-shot placement", "single device cpu:0",
                  "single device cpu:1"):   # each with its interval, or the one it is the same placement as
        assert "ms [" in rows[label] or "the same placement as" in rows[label], label
    assert rows["best placement found"].endswith("ms [1.000, 1.000]   2.00x [2.00, 2.00], faster")
    assert "speedup over the best single device (cpu:0): 2.00x [2.00, 2.00], faster" in out
    summary = json.loads((run / "summary.json").read_text())
    assert f"against the best list heuristic ({summary['best_heuristic']}): 1.01x [1.01, 1.01], tied (within 2%)" in out
    assert summary["vs_best_heuristic"]["verdict"] == "tied" and summary["vs_best_single_device"]["verdict"] == "faster"
