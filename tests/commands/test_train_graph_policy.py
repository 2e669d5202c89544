"""`placer train --policy pretrained|FILE`: the graph policy fine-tuned on one graph and cluster."""

from __future__ import annotations

import json

import onnx
import pytest
import torch

from placer.cli import main
from placer.costmodel.roofline import cluster_measurer
from placer.hardware import load_cluster
from placer.kernels.loading import load_graph
from placer.placement import Placement
from placer.policy.gnn import GraphPlacementPolicy, PolicyConfig, save_policy
from testgraphs import branches


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
    assert summary["samples"] >= 96
    assert summary["best_step_time"] < summary["zero_shot_step_time"]   # sampling found a faster one
    placement = Placement.load(run / "placement.json")
    graph = load_graph(str(model))
    measured = cluster_measurer(load_cluster("4xa100-nvlink"), graph).measure(placement)
    assert measured.step_time == pytest.approx(summary["best_step_time"], rel=1e-9)   # the file holds the best
    assert placement.extra["placer"]["source"].startswith("graph policy, fine-tuned")
    assert (run / "policy.pt").exists() and "best list heuristic" in capsys.readouterr().out


def test_fine_tuning_refuses_what_it_cannot_do_in_one_line(tmp_path, model, policy_file, capsys):
    base = ["train", "--graph", str(model), "--samples", "10", "--run-dir", str(tmp_path / "r")]
    assert main(base + ["--policy", str(policy_file)]) == 2
    assert "--cluster" in capsys.readouterr().err
    assert main(base + ["--policy", "lstm", "--cluster", "2xt4-pcie"]) == 2
    assert "seq2seq, pretrained or a graph policy file" in capsys.readouterr().err
    assert main(base + ["--policy", str(policy_file), "--cluster", "2xt4-pcie", "--reward", "real"]) == 2
    assert "simulated" in capsys.readouterr().err
