"""`placer place`: a zoo model and a user's ONNX file with an op the policy's vocabulary lacks,
placed zero-shot by a graph policy checkpoint, the placement written and priced."""

from __future__ import annotations

import json

import onnx
import pytest
import torch

from placer.cli import main
from placer.placement import Placement
from placer.policy.gnn import GraphPlacementPolicy, PolicyConfig, save_policy
from testgraphs import unseen_op_model


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory):
    torch.manual_seed(0)
    return save_policy(GraphPlacementPolicy(PolicyConfig(hidden=16, layers=1, heads=1, rounds=2)),
                       tmp_path_factory.mktemp("policy") / "policy.pt")


def test_a_zoo_model_is_placed_and_priced_against_the_best_heuristic(tmp_path, policy_file, capsys):
    out = tmp_path / "placement.json"
    assert main(["place", "--graph", "inception_v3.onnx", "--cluster",
                 "4xa100-nvlink", "--out", str(out), "--policy", str(policy_file)]) == 0
    text = capsys.readouterr().out
    assert "graph policy" in text and "best list heuristic" in text
    placement = Placement.load(out)
    info = placement.extra["placer"]
    assert info["name"] == "gnn" and info["best_heuristic_step_time"] > 0 and info["simulated_step_time"] > 0
    assert set(placement.devices) == {"cpu:0", "cuda:0", "cuda:1", "cuda:2", "cuda:3"}


def test_an_onnx_file_with_an_op_outside_the_vocabulary_is_placed(tmp_path, policy_file):
    model = tmp_path / "mish.onnx"
    onnx.save(unseen_op_model(), model)
    out = tmp_path / "placement.json"
    assert main(["place", "--graph", str(model), "--cluster", "2xt4-pcie", "--out", str(out),
                 "--policy", str(policy_file)]) == 0
    nodes = json.loads(out.read_text())["nodes"]
    assert set(nodes) == {"relu", "mish", "mm"}


def test_place_refuses_a_missing_cluster_or_a_file_that_is_no_policy(tmp_path, capsys):
    model = tmp_path / "mish.onnx"
    onnx.save(unseen_op_model(), model)
    assert main(["place", "--graph", str(model), "--out", str(tmp_path / "p.json")]) == 2
    assert "--cluster" in capsys.readouterr().err
    bogus = tmp_path / "bogus.pt"
    bogus.write_text("not a checkpoint")
    assert main(["place", "--graph", str(model), "--cluster", "2xt4-pcie", "--out", str(tmp_path / "p.json"),
                 "--policy", str(bogus)]) == 2
    assert "graph policy checkpoint" in capsys.readouterr().err


def test_the_shipped_policy_places_a_zoo_model_with_no_policy_given(tmp_path, capsys):
    """A fresh install places with the checkpoint shipped as package data, which says how it was made."""
    from placer.policy.gnn.checkpoint import PRETRAINED, read_info

    assert PRETRAINED.is_file() and PRETRAINED.stat().st_size < 5 * 2**20
    info = read_info()
    assert info["command"].startswith("placer pretrain") and info["held_out"]
    out = tmp_path / "placement.json"
    assert main(["place", "--graph", "inception_v3.onnx", "--cluster", "dgx1-v100", "--out", str(out)]) == 0
    assert "pre-trained, shipped with placer" in capsys.readouterr().out
    assert Placement.load(out).extra["placer"]["policy"] == "pretrained"


def test_place_never_writes_a_placement_slower_than_the_best_heuristic(tmp_path, policy_file, capsys):
    """An untrained policy places Inception-v3 on a DGX-1 far slower than HEFT: what `place` writes is
    then the heuristic's own placement, said so, and the policy's figure is kept beside it."""
    out = tmp_path / "placement.json"
    assert main(["place", "--graph", "inception_v3.onnx", "--cluster", "dgx1-v100", "--out", str(out),
                 "--policy", str(policy_file)]) == 0
    info = Placement.load(out).extra["placer"]
    assert info["simulated_step_time"] <= info["best_heuristic_step_time"]
    assert info["policy_step_time"] > info["best_heuristic_step_time"] and "best list heuristic" in info["chain"]
    assert "kept instead" in capsys.readouterr().out


def test_place_gives_the_lower_bound_beside_the_step_time_as_compare_does(tmp_path, policy_file, capsys):
    out = tmp_path / "placement.json"
    assert main(["place", "--graph", "inception_v3.onnx", "--cluster", "2xt4-pcie", "--out", str(out),
                 "--policy", str(policy_file)]) == 0
    printed = capsys.readouterr().out
    info = Placement.load(out).extra["placer"]
    # the bound of compare --cluster (same costs and memory caps) on the same graph and cluster
    assert main(["compare", "--graph", "inception_v3.onnx", "--cluster", "2xt4-pcie", "--placers", "single",
                 "--json", "--no-plot", "--out", str(tmp_path / "compared")]) == 0
    bound = json.loads((tmp_path / "compared" / "compare.json").read_text())["lower_bound"]["value"]
    t = info["simulated_step_time"]
    assert info["lower_bound_step_time"] == bound < t and info["ratio_to_lower_bound"] == t / bound
    assert f"{t * 1e3:10.3f} ms simulated" in printed and f"lower bound {bound * 1e3:.3f} ms ({t / bound:.2f}x)" in printed
