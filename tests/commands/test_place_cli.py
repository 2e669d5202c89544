"""`placer place`: a zoo model and a user's ONNX file with an op the policy's vocabulary lacks,
placed zero-shot by a graph policy checkpoint, the placement written and priced."""

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
from placer.policy.gnn import GraphPlacementPolicy, PolicyConfig, load_policy, save_policy
from placer.policy.gnn.episode import make_episode
from placer.jobs.place import SAMPLED_CHAINS
from placer.policy.gnn.placing import place_episode
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
    # the placement written is the one priced, the --policy given made it, and the heuristic's figure is its own
    graph, cluster = load_graph("inception_v3.onnx"), load_cluster("4xa100-nvlink")
    assert cluster_measurer(cluster, graph).measure(placement).step_time == pytest.approx(info["simulated_step_time"],
                                                                                          rel=1e-9)
    episode = make_episode(graph, cluster)
    own = place_episode(load_policy(policy_file)[0], episode, keep_heuristic=False,
                        chains=SAMPLED_CHAINS).extra["placer"]   # place's default: 64 sampled chains, seed 0
    assert info["rounds_from_nothing"] == own["rounds_from_nothing"]
    assert info["rounds_from_heuristic"] == own["rounds_from_heuristic"]
    assert info.get("policy_step_time", info["simulated_step_time"]) == own["simulated_step_time"]
    assert info["best_heuristic"] == episode.best_name and info["best_heuristic_step_time"] == episode.best_time


def test_an_onnx_file_with_an_op_outside_the_vocabulary_is_placed(tmp_path, policy_file):
    model = tmp_path / "mish.onnx"
    onnx.save(unseen_op_model(), model)
    out = tmp_path / "placement.json"
    # -o, as apply and zoo export take it
    assert main(["place", "--graph", str(model), "--cluster", "2xt4-pcie", "-o", str(out),
                 "--policy", str(policy_file)]) == 0
    nodes = json.loads(out.read_text())["nodes"]
    assert set(nodes) == {"relu", "mish", "mm"}
    # here the policy's own placement is written (no heuristic's is faster), and it is the one priced
    placement = Placement.load(out)
    info = placement.extra["placer"]
    assert "round" in info and len(set(info["rounds_from_nothing"] + info["rounds_from_heuristic"])) > 1
    measured = cluster_measurer(load_cluster("2xt4-pcie"), load_graph(str(model))).measure(placement)
    assert measured.step_time == pytest.approx(info["simulated_step_time"], rel=1e-9)


def test_the_sampled_chains_are_scored_beside_the_most_likely_ones(tmp_path, capsys):
    """The fastest of the policy's sampled chains and its most likely ones is written: with the
    shipped policy on Inception-v3 and the DGX-1 (held out of its training) faster than the most
    likely ones alone; a negative count is refused."""
    written = {}
    for samples in ("0", "64"):
        out = tmp_path / f"placement-{samples}.json"
        assert main(["place", "--graph", "inception_v3.onnx", "--cluster", "dgx1-v100", "--out", str(out),
                     "--chains", samples]) == 0
        written[samples] = Placement.load(out).extra["placer"]
    alone, sampled = written["0"], written["64"]
    assert alone["sampled_chains"] == 0 and sampled["sampled_chains"] == 64
    assert sampled["first_chains_step_time"] == alone["first_chains_step_time"]
    policy_s = lambda info: info.get("policy_step_time", info["simulated_step_time"])  # noqa: E731
    assert policy_s(sampled) < policy_s(alone) == alone["first_chains_step_time"]
    capsys.readouterr()
    model = tmp_path / "mish.onnx"
    onnx.save(unseen_op_model(), model)
    assert main(["place", "--graph", str(model), "--cluster", "2xt4-pcie", "--out", str(tmp_path / "p.json"),
                 "--chains", "-1"]) == 2
    assert "--chains must be from 0 to 4096, not -1" in capsys.readouterr().err


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
