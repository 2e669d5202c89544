"""Pre-training the graph policy: curves, checkpoints, resume, held-out figures, Ray rollouts."""

from __future__ import annotations

import json
import pytest
import torch

from placer.cli import main
from placer.graph.load import load_graph
from placer.corpus import CorpusItem
from placer.hardware import load_cluster
from placer.policy.gnn import load_policy
from placer.policy.gnn.learn import LearnConfig
from placer.policy.gnn.model import PolicyConfig
from placer.policy.gnn.pretrain import PretrainConfig, pretrain
from testgraphs import branches


@pytest.fixture(scope="module")
def items():
    return [CorpusItem(f"branches{n}@{c}", "branches", load_graph(branches(n, 2, width=128, batch=32)), load_cluster(c))
            for n, c in [(2, "2xt4-pcie"), (3, "4xa100-nvlink"), (4, "paper-2xk40")]]


CONFIG = PretrainConfig(items_per_update=2, policy=PolicyConfig(hidden=8, layers=1, heads=1, rounds=2),
                        learn=LearnConfig(samples=4), checkpoint_every=2)


def test_pretraining_writes_curves_checkpoints_and_held_out_figures(tmp_path, items):
    result = pretrain(tmp_path, items[:2], items[2:], CONFIG, updates=3, log=lambda _: None)
    assert result.updates == 3 and result.samples == 3 * 2 * 4 * 2
    assert list(tmp_path.glob("events.out.tfevents.*"))
    policy, info = load_policy(tmp_path / "policy.pt")
    assert info["config"]["policy"]["hidden"] == 8
    summary = json.loads((tmp_path / "summary.json").read_text())
    (row,) = summary["held_out"]
    assert row["name"] == "branches4@paper-2xk40" and row["ratio_to_best_heuristic"] > 0


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path, items):
    whole = pretrain(tmp_path / "whole", items, [], CONFIG, updates=4, log=lambda _: None)
    pretrain(tmp_path / "split", items, [], CONFIG, updates=2, log=lambda _: None)
    split = pretrain(tmp_path / "split", items, [], CONFIG, updates=4, resume=True, log=lambda _: None)
    assert split.updates == whole.updates == 4 and split.samples == whole.samples
    a, _ = load_policy(tmp_path / "whole" / "policy.pt")
    b, _ = load_policy(tmp_path / "split" / "policy.pt")
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


def test_resume_refuses_other_settings(tmp_path, items):
    pretrain(tmp_path, items, [], CONFIG, updates=1, log=lambda _: None)
    other = PretrainConfig(items_per_update=1, policy=CONFIG.policy, learn=CONFIG.learn)
    with pytest.raises(Exception, match="other settings"):
        pretrain(tmp_path, items, [], other, updates=2, resume=True, log=lambda _: None)


def test_rollouts_on_ray_workers_train_too(tmp_path, items):
    ray = pytest.importorskip("ray")
    from placer.policy.gnn.rollouts import RayRollouts

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result = pretrain(tmp_path, items, [], CONFIG, updates=2, rollouts=RayRollouts(2), log=lambda _: None)
    finally:
        ray.shutdown()
    assert result.updates == 2 and result.samples == 2 * 2 * 4 * 2


def test_the_command_refuses_bad_options_in_one_line(tmp_path, capsys):
    assert main(["pretrain", "--run-dir", str(tmp_path / "r")]) == 2
    assert "--budget" in capsys.readouterr().err
    assert main(["pretrain", "--run-dir", str(tmp_path / "r"), "--updates", "1", "--resume"]) == 2
    assert "no checkpoint.pt" in capsys.readouterr().err


def test_the_command_pretrains_on_the_small_corpus_and_judges_every_held_out_item(tmp_path, capsys):
    from placer.corpus import held_out_items

    run = tmp_path / "run"
    assert main(["pretrain", "--corpus", "small", "--updates", "1", "--items-per-update", "2", "--samples", "2",
                 "--hidden", "8", "--layers", "1", "--run-dir", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert [r["name"] for r in summary["held_out"]] == [i.name for i in held_out_items(0, "small")]
    assert all(r["ratio_to_best_baseline"] >= r["ratio_to_best_heuristic"] for r in summary["held_out"])
    assert "held out, placed zero-shot" in capsys.readouterr().out
