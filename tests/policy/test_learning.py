"""Evidence that it learns, with the deterministic simulator: the optimum of a problem solved by
brute force is reached, the policy itself comes to prefer it, and loss, baseline and entropy move
the way REINFORCE says. Also: exact resume, checkpoint errors, and what a run folder holds."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from placer.errors import PlacerError
from placer.graph.grouping import group_graph
from placer.graph.load import load_graph
from placer.costmodel.simulator import SimulatedMeasurer
from placer.placement import Placement
from placer.policy.checkpoint import FILENAME
from placer.policy.hparams import Hyperparameters
from placer.policy.trainer import train
from testmeasurers import StopAfter

# A small policy, for speed; being small it tolerates a larger step than the default's.
HP = Hyperparameters(hidden_size=32, lr=0.01, samples_per_update=4)
SAMPLES = 200


@pytest.fixture(scope="module")
def trained(problem, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("learn")
    result = train(problem.graph, problem.measurer, problem.grouping, run_dir, HP, samples=SAMPLES, seed=0)
    return result, run_dir, torch.load(run_dir / FILENAME, weights_only=False)["state"]["history"]


def test_the_problem_is_hard_for_a_single_device_and_has_a_known_optimum(problem):
    assert problem.feasible < 2 ** len(problem.grouping)          # some placements run out of memory
    for d in problem.measurer.devices:
        single = problem.measurer.measure(Placement.single_device(list(problem.graph.nodes), d, None,
                                                                  problem.measurer.devices))
        assert not single.ok and single.failure == "oom"
    assert 0 < len(problem.optimal) < problem.feasible


def test_training_reaches_the_optimum_within_the_sample_budget(trained, problem):
    result, _, history = trained
    assert result.summary["best_step_time"] == pytest.approx(problem.optimum)
    first_optimal = next(h["samples"] for h in history if h["best_step_time"] == pytest.approx(problem.optimum))
    assert first_optimal <= SAMPLES


def test_the_trained_policy_prefers_a_placement_that_fits_and_is_near_the_optimum(trained, problem):
    """The policy's own most likely placement (not just the best sample) has learned the memory
    caps and the parallel branches: it runs, and within 1.5x of the optimum (a random placement
    fails half the time)."""
    result, _, _ = trained
    obs, _ = result.env.reset()
    with torch.no_grad():
        greedy, _, _ = result.policy(torch.from_numpy(obs["features"]), torch.from_numpy(obs["adjacency"]), greedy=True)
    m = problem.measurer.measure(problem.grouping.expand(greedy[0].tolist(), problem.measurer.devices))
    assert m.ok and m.step_time <= 1.5 * problem.optimum


def test_failures_become_rarer_and_rewards_higher_as_it_learns(trained):
    _, _, history = trained
    first, last = history[:10], history[-10:]
    assert np.mean([h["failure_rate"] for h in last]) < np.mean([h["failure_rate"] for h in first])
    assert np.mean([h["reward_mean"] for h in last]) > np.mean([h["reward_mean"] for h in first])


def test_the_entropy_falls_and_the_baseline_rises_toward_the_rewards(trained):
    _, _, history = trained
    assert np.mean([h["entropy"] for h in history[-10:]]) < np.mean([h["entropy"] for h in history[:10]])
    # The baseline starts at the single devices' reward (both fail: -sqrt(100)) and climbs.
    assert history[0]["baseline"] < -9.0 < history[-1]["baseline"]
    assert all(np.isfinite(h["reward_mean"]) and np.isfinite(h["entropy"]) for h in history)


def test_the_result_is_never_worse_than_the_best_single_device(tmp_path, make_branches):
    """On a chain, any split only adds transfers: the best single device must be the answer."""
    graph = load_graph(make_branches(1, 6))
    measurer = SimulatedMeasurer(graph, ["cpu:0", "cpu:1"])
    result = train(graph, measurer, group_graph(graph, 6, 2), tmp_path, HP, samples=16, seed=0)
    s = result.summary
    assert s["best_step_time"] == pytest.approx(min(s["single_device_step_times"].values()))
    assert s["speedup_vs_best_single_device"] == pytest.approx(1.0)


def test_resuming_reproduces_an_uninterrupted_run_bit_for_bit(problem, tmp_path):
    kw = dict(hp=HP, seed=3)
    whole = train(problem.graph, problem.measurer, problem.grouping, tmp_path / "whole", samples=24, **kw)
    train(problem.graph, problem.measurer, problem.grouping, tmp_path / "split", samples=12, **kw)
    resumed = train(problem.graph, problem.measurer, problem.grouping, tmp_path / "split", samples=24,
                    resume=True, **kw)
    a = torch.load(tmp_path / "whole" / FILENAME, weights_only=False)
    b = torch.load(tmp_path / "split" / FILENAME, weights_only=False)
    assert a["state"]["losses"] == b["state"]["losses"] and len(a["state"]["losses"]) == 6
    assert a["state"]["history"] == [{**h} for h in b["state"]["history"]]
    assert a["state"]["best"] == b["state"]["best"] and a["state"]["baseline"] == b["state"]["baseline"]
    assert all(torch.equal(a["policy"][k], b["policy"][k]) for k in a["policy"])
    assert whole.placement.nodes == resumed.placement.nodes
    assert a["cache"]["entries"] == b["cache"]["entries"]


def test_a_corrupt_or_mismatched_checkpoint_is_a_clear_error(problem, tmp_path):
    train(problem.graph, problem.measurer, problem.grouping, tmp_path / "run", HP, samples=4, seed=0)
    with pytest.raises(PlacerError, match="different seed"):
        train(problem.graph, problem.measurer, problem.grouping, tmp_path / "run", HP, samples=8, seed=1, resume=True)
    other = group_graph(problem.graph, 4, 2)
    with pytest.raises(PlacerError, match="different grouping"):
        train(problem.graph, problem.measurer, other, tmp_path / "run", HP, samples=8, seed=0, resume=True)
    (tmp_path / "run" / FILENAME).write_bytes(b"not a checkpoint")
    with pytest.raises(PlacerError, match="corrupt"):
        train(problem.graph, problem.measurer, problem.grouping, tmp_path / "run", HP, samples=8, seed=0, resume=True)
    with pytest.raises(PlacerError, match="no checkpoint"):
        train(problem.graph, problem.measurer, problem.grouping, tmp_path / "none", HP, samples=8, resume=True)


def test_the_run_folder_holds_the_placement_the_summary_and_the_curves(trained, problem):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result, run_dir, _ = trained
    placement = Placement.load(run_dir / "placement.json")
    assert placement.graph_sha256 == problem.graph.sha256 and set(placement.nodes) == set(problem.graph.nodes)
    assert placement.devices == ["cpu:0", "cpu:1"]
    assert placement.measurement["step_time"] == pytest.approx(problem.optimum)
    summary = json.loads((run_dir / "summary.json").read_text())
    # A run ends at its sample count, or earlier once converged with nothing new left to measure.
    assert summary["wall_time_s"] > 0 and (summary["samples"] == SAMPLES or (
        summary["samples"] < SAMPLES and summary["stopped_early"] == "converged" and summary["converged"]))
    assert summary["greedy"]["step_time"] == pytest.approx(problem.optimum)   # the policy's own placement
    assert set(summary["single_device_step_times"]) == {"cpu:0", "cpu:1"}
    assert summary["speedup_vs_best_single_device"] is None      # no single device could run it
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    tags = events.Tags()
    for tag in ["charts/reward_mean", "charts/reward_max", "charts/step_time_sampled", "charts/best_step_time",
                "losses/baseline", "losses/entropy", "losses/policy_loss", "charts/failure_rate",
                "charts/cache_hit_rate"]:
        assert tag in tags["scalars"], tag
    assert "charts/best_placement" in tags["images"]
    assert events.Scalars("charts/best_step_time")[-1].value == pytest.approx(problem.optimum, rel=1e-6)
    assert events.Scalars("charts/cache_hit_rate")[-1].value > 0     # a converged policy repeats itself


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), PlacerError("no worker is left")], ids=["ctrl-c", "failure"])
def test_a_run_stopped_mid_batch_saves_and_resumes_exactly_where_it_stopped(problem, tmp_path, exc):
    kw = dict(hp=HP, seed=5)
    whole = train(problem.graph, problem.measurer, problem.grouping, tmp_path / "whole", samples=20, **kw)
    # 2 single devices, then per update the greedy placement and the batch's new placements:
    # the 15th measurement lands inside the third batch, after its placements were sampled.
    cut = StopAfter(problem.measurer, 15, exc)
    if isinstance(exc, KeyboardInterrupt):
        stopped = train(problem.graph, cut, problem.grouping, tmp_path / "cut", samples=20, **kw)
        assert stopped.interrupted and stopped.summary["samples"] == 8
    else:
        with pytest.raises(PlacerError, match="no worker"):
            train(problem.graph, cut, problem.grouping, tmp_path / "cut", samples=20, **kw)
        assert torch.load(tmp_path / "cut" / FILENAME, weights_only=False)["state"]["samples"] == 8
    resumed = train(problem.graph, problem.measurer, problem.grouping, tmp_path / "cut", samples=20,
                    resume=True, **kw)
    a = torch.load(tmp_path / "whole" / FILENAME, weights_only=False)
    b = torch.load(tmp_path / "cut" / FILENAME, weights_only=False)
    assert a["state"]["losses"] == b["state"]["losses"] and a["state"]["history"] == b["state"]["history"]
    assert whole.placement.nodes == resumed.placement.nodes and not resumed.interrupted


def test_the_side_by_side_confirmation_decides_and_a_single_device_wins_ties_or_better(tmp_path, make_branches):
    """Training finds a split faster than one device; measured again where transfers turn out
    to be very slow, the split loses, and the run's answer is the single device."""
    from placer.costmodel.simulator import AnalyticCostModel

    graph = load_graph(make_branches(4, 2))
    devices = ["cpu:0", "cpu:1"]
    slow_links = AnalyticCostModel(devices, links={("cpu:0", "cpu:1"): (1.0, 1e3), ("cpu:1", "cpu:0"): (1.0, 1e3)})
    result = train(graph, SimulatedMeasurer(graph, devices), group_graph(graph, 4, 2), tmp_path, HP, samples=16,
                   seed=0, confirm=SimulatedMeasurer(graph, devices, slow_links))
    s = result.summary
    assert s["confirmed_side_by_side"] and s["during_training"]["best_step_time"] < min(
        s["during_training"]["single_device_step_times"].values())
    assert s["confirmed_candidates"] and all(c["step_time"] > s["best_step_time"] for c in s["confirmed_candidates"])
    assert s["best_source"].startswith("single device") and s["speedup_vs_best_single_device"] == 1.0
    assert len(set(result.placement.nodes.values())) == 1


class _Pool:
    """A measurer like a pool of workers: measures batches at once and reports on its workers."""

    def __init__(self, inner) -> None:
        self.inner, self.devices, self.batches = inner, inner.devices, []

    def measure(self, placement):
        return self.inner.measure(placement)

    def measure_many(self, placements):
        self.batches.append(len(placements))
        return [self.inner.measure(p) for p in placements]

    def report(self):
        return {"workers": 2, "retried": 1, "lost": [{"worker": "w1", "reason": "died"}]}


def test_a_pool_gets_each_batch_in_one_call_and_its_report_reaches_the_summary(problem, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    pool = _Pool(problem.measurer)
    result = train(problem.graph, pool, problem.grouping, tmp_path, HP, samples=16, seed=0)
    assert max(pool.batches) > 1 and result.summary["workers"] == pool.report()
    events = EventAccumulator(str(tmp_path)).Reload()
    assert events.Scalars("workers/retried")[-1].value == 1 and events.Scalars("workers/lost")[-1].value == 1
