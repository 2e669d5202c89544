"""Pre-training the graph policy: curves, checkpoints, resume, held-out figures, Ray rollouts."""

from __future__ import annotations

import json
import numpy as np
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
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from placer.policy.gnn.checkpoint import load_checkpoint
    from placer.policy.gnn.episode import make_episode
    from placer.policy.gnn.model import GraphPlacementPolicy
    from placer.policy.gnn.placing import place_episode

    result = pretrain(tmp_path, items[:2], items[2:], CONFIG, updates=3, log=lambda _: None)
    assert result.updates == 3 and result.samples == 3 * 2 * 4 * 2
    # a point per update on the curves, at the samples so far
    events = EventAccumulator(str(tmp_path)).Reload()
    for tag in ("losses/loss", "charts/cost_mean", "charts/entropy_per_group"):
        assert [e.step for e in events.Scalars(tag)] == [16, 32, 48], tag
    assert "held_out/branches4@paper-2xk40" in events.Tags()["scalars"]
    # policy.pt: the trained weights (not the seed's), as the checkpoint holds them after the last update
    policy, info = load_policy(tmp_path / "policy.pt")
    assert info["config"]["policy"]["hidden"] == 8
    torch.manual_seed(CONFIG.seed)
    start = GraphPlacementPolicy(CONFIG.policy).state_dict()
    assert not all(torch.equal(x, start[k]) for k, x in policy.state_dict().items())
    checkpointed, _, extra = load_checkpoint(tmp_path / "checkpoint.pt")
    assert extra["updates"] == 3 and extra["samples"] == result.samples and extra["optimizer"]["state"]
    for (name, x), y in zip(policy.state_dict().items(), checkpointed.state_dict().values()):
        assert torch.equal(x, y), name
    # the held-out figure: that policy's own zero-shot placement over the best list heuristic's
    summary = json.loads((tmp_path / "summary.json").read_text())
    (row,) = summary["held_out"]
    assert row["name"] == "branches4@paper-2xk40"
    episode = make_episode(items[2].graph, items[2].cluster)
    own = place_episode(policy, episode, keep_heuristic=False).extra["placer"]["simulated_step_time"]
    assert row["best_heuristic_step_time_s"] == episode.best_time
    assert row["ratio_to_best_heuristic"] == pytest.approx(own / episode.best_time, rel=1e-12)


class CountingRollouts:
    """This process's rollouts, counting the updates they serve."""

    def __init__(self) -> None:
        from placer.policy.gnn.rollouts import LocalRollouts

        self.local, self.updates = LocalRollouts(), 0

    def run(self, *args):
        self.updates += 1
        return self.local.run(*args)

    def close(self) -> None:
        pass


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path, items):
    whole = pretrain(tmp_path / "whole", items, [], CONFIG, updates=4, log=lambda _: None)
    pretrain(tmp_path / "split", items, [], CONFIG, updates=2, log=lambda _: None)
    resumed = CountingRollouts()
    split = pretrain(tmp_path / "split", items, [], CONFIG, updates=4, resume=True, rollouts=resumed,
                     log=lambda _: None)
    assert resumed.updates == 2   # only the updates left: the first two come from the checkpoint
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


TIE = 1e-5   # relative gap in logits under which two devices tie (see most_likely)


def most_likely(policy, episode, initial, actions) -> bool:
    """Whether every round of every sample puts each group on one of its most likely devices.

    Identical devices tie only up to float32 rounding: their logits come from other rows of one
    matrix product, which the kernels may sum in another order (whether they tie exactly depends on
    the CPU and the library's version: 1-2 ulps apart, ~1e-7 of the logit, with torch 2.13 here), and
    the sharp policy samples either of them. So a device within TIE of the best, relatively, is one
    of the most likely; the other devices of these items are at least 1e-3 below (e^-50 and less
    once scaled by 1e6: never sampled), whichever process computes the logits."""
    x = episode.tensors
    with torch.no_grad():
        encoded, previous = policy.encode(x), torch.from_numpy(initial)
        for r in range(actions.shape[1]):
            logits = policy.logits(x, encoded, previous)
            previous = torch.from_numpy(actions[:, r])
            chosen, best = logits.gather(2, previous[..., None]).squeeze(2), logits.max(dim=2).values
            if not (best - chosen <= TIE * best.abs()).all():
                return False
    return True


def test_rollouts_on_ray_workers_train_too(tmp_path, items, local_ray):
    from placer.policy.gnn.episode import make_episode
    from placer.policy.gnn.learn import costs_of, initial_placements
    from placer.policy.gnn.model import GraphPlacementPolicy
    from placer.policy.gnn.rollouts import RayRollouts

    # a policy whose samples are its most likely devices (logits scaled 1e6; identical devices tie,
    # up to rounding): the workers' rollouts show whether they sample with the weights they are sent
    torch.manual_seed(1)
    sharp = GraphPlacementPolicy(CONFIG.policy)
    with torch.no_grad():
        sharp.score[2].weight.mul_(1e6)
    episodes = [make_episode(i.graph, i.cluster, name=i.name) for i in items]
    pool = RayRollouts(2)   # on the session's runtime (local_ray), which it leaves running
    result = pretrain(tmp_path, items, [], CONFIG, updates=2, rollouts=pool, log=lambda _: None)
    got = pool.run(sharp, items, episodes, CONFIG.learn, seed=3)   # the pool of a run: the weights sent now
    assert result.updates == 2 and result.samples == 2 * 2 * 4 * 2
    for episode, r in zip(episodes, got):   # each item's rollout back in its place
        assert (r.initial == initial_placements(episode, CONFIG.learn.samples)).all(), episode.name
        assert most_likely(sharp, episode, r.initial, r.actions), episode.name
        # simulated in the worker's process and in this one: equal up to rounding
        np.testing.assert_allclose(r.costs, costs_of(episode, r.actions, CONFIG.learn.failure_ratio), rtol=1e-12,
                                   atol=0, err_msg=episode.name)


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
    # the best baseline: the best list heuristic or local search (from it or the solver), which beats it somewhere
    for r in summary["held_out"]:
        best = min(r["best_heuristic_step_time_s"], r["local_search_step_time_s"])
        assert r["ratio_to_best_baseline"] == pytest.approx(r["policy_step_time_s"] / best, rel=1e-12), r["name"]
    assert any(r["local_search_step_time_s"] < r["best_heuristic_step_time_s"] for r in summary["held_out"])
    assert "held out, placed zero-shot" in capsys.readouterr().out


def test_a_held_out_item_that_fits_no_device_is_a_failure_row_not_the_end_of_the_run(items):
    """Llama-2-7B at 4096 tokens fits no placement the policy makes on the DGX-1: the run had
    trained 25 minutes and then stopped on it, its summary unwritten."""
    import dataclasses

    from placer.policy.gnn.model import GraphPlacementPolicy
    from placer.policy.gnn.pretrain import held_out_figures

    cluster = items[1].cluster
    tiny = tuple(dataclasses.replace(d, model=dataclasses.replace(d.model, memory_bytes=1024)) for d in cluster.devices)
    cramped = CorpusItem("cramped", "branches", items[1].graph, dataclasses.replace(cluster, devices=tiny))
    torch.manual_seed(0)
    rows = held_out_figures(GraphPlacementPolicy(CONFIG.policy), [cramped, items[0]])
    assert "memory" in rows[0]["failure"] and rows[0]["ratio_to_best_baseline"] is None
    assert "failure" not in rows[1] and rows[1]["ratio_to_best_heuristic"] > 0


def test_a_run_can_start_from_a_policys_weights_and_refuses_another_shape(tmp_path, items):
    """--start-from: with a learning rate of 0 the policy written is the one started from, where a
    fresh network (the same seed) is not; a file of another shape is a one-line refusal."""
    import dataclasses

    from placer.errors import PlacerError
    from placer.policy.gnn.checkpoint import save_policy
    from placer.policy.gnn.model import GraphPlacementPolicy

    torch.manual_seed(123)
    start = save_policy(GraphPlacementPolicy(CONFIG.policy), tmp_path / "start.pt")
    frozen = dataclasses.replace(CONFIG, learn=LearnConfig(samples=4, lr=0.0))
    pretrain(tmp_path / "from", items[:2], [], frozen, updates=1, start_from=start, log=lambda _: None)
    pretrain(tmp_path / "fresh", items[:2], [], frozen, updates=1, log=lambda _: None)
    began, continued, fresh = (load_policy(p)[0].state_dict() for p in
                               (start, tmp_path / "from" / "policy.pt", tmp_path / "fresh" / "policy.pt"))
    assert all(torch.equal(began[k], continued[k]) for k in began)
    assert not all(torch.equal(began[k], fresh[k]) for k in began)
    other = dataclasses.replace(CONFIG, policy=PolicyConfig(hidden=16, layers=1, heads=1, rounds=2))
    with pytest.raises(PlacerError, match="holds a policy of another shape"):
        pretrain(tmp_path / "other", items[:2], [], other, updates=1, start_from=start, log=lambda _: None)


def test_a_held_out_item_whose_chain_from_nothing_fits_no_round_is_counted_apart_in_strict_json():
    """JSON has no infinity: such an item's ratio is null, left out of the mean and worst and
    counted, and the printed line says 'no fit' (the shipped policy.json had Infinity there)."""
    from placer.jobs.pretrain import held_out_lines
    from placer.policy.gnn.checkpoint import PRETRAINED
    from placer.policy.gnn.pretrain import PretrainResult, _ratio

    assert _ratio(None, 2.0) is None and _ratio(3.0, 2.0) == 1.5 and _ratio(3.0, None) is None
    row = {"name": "x@c", "ratio_to_best_heuristic": 1.0, "ratio_to_best_baseline": 1.0,
           "from_nothing_ratio_to_best_heuristic": None, "seconds_to_place": 0.5}
    summary = {"held_out_mean_ratio": 1.0, "held_out_mean_ratio_to_best_baseline": 1.0,
               "held_out_from_nothing_mean_ratio": None, "held_out_worst_ratio": 1.0,
               "held_out_worst_ratio_to_best_baseline": 1.0, "held_out_from_nothing_worst_ratio": None,
               "held_out_from_nothing_unfit": 1}
    lines = held_out_lines(PretrainResult(1, 1, 1.0, [row], summary))
    assert "no fit" in lines[1] and lines[-1].endswith("(from nothing: 1 placed item(s) fitted no round, left out)")

    def refuse(constant):
        raise ValueError(f"{constant} is no JSON")

    shipped = json.loads(PRETRAINED.with_suffix(".json").read_text(), parse_constant=refuse)
    assert shipped["held_out_from_nothing_unfit"] == 1
