"""The training progress bar ends at 100%, or its last line says why the run stopped before."""

from __future__ import annotations

import time

import pytest

from placer.policy.hparams import Hyperparameters
from placer.policy.phases import RewardPlan
from placer.policy.run_state import TrainState
from placer.policy.trainer import Budget, train
from testmeasurers import StopAfter

HP = Hyperparameters(hidden_size=32, lr=0.01, samples_per_update=4)


def _last_line(err: str) -> str:
    """The bar as it was left: tqdm redraws its line with carriage returns."""
    return err.replace("\r", "\n").rstrip().splitlines()[-1]


def _train(problem, run_dir, samples, measurer=None):
    return train(problem.graph, measurer or problem.measurer, problem.grouping, run_dir, HP, samples=samples,
                 seed=0, progress=True)


def test_a_run_that_draws_all_its_samples_ends_at_100_percent(problem, tmp_path, capsys):
    _train(problem, tmp_path, 8)
    last = _last_line(capsys.readouterr().err)
    assert "100%" in last and "8/8" in last and "stopped" not in last


def test_a_run_that_converges_first_says_so_on_its_last_line(problem, tmp_path, capsys):
    result = _train(problem, tmp_path, 400)
    assert result.summary["stopped_early"] == "converged" and result.summary["samples"] < 400
    last = _last_line(capsys.readouterr().err)
    assert last.startswith("training stopped early (the policy converged") and f"{result.summary['samples']}/400" in last


def test_ctrl_c_says_so_on_the_last_line(problem, tmp_path, capsys):
    result = _train(problem, tmp_path, 40, StopAfter(problem.measurer, 15, KeyboardInterrupt()))
    assert result.interrupted
    assert _last_line(capsys.readouterr().err).startswith("training stopped early (interrupted (Ctrl-C); --resume")


@pytest.mark.parametrize("samples, seconds, said", [
    (32, 0.001, "its 0.001 s were spent"),       # samples and seconds given: the seconds ran out first
    (None, 0.001, None),                         # by seconds alone, all spent: the bar is full
    (8, None, "the next update's 4 samples and its greedy placement do not fit in the 4 left")])
def test_the_reason_names_what_ended_the_run(samples, seconds, said):
    state = TrainState(samples=4)
    budget = Budget(samples, seconds, RewardPlan("real"), 4, False, state, counts_evaluations=True)
    time.sleep(0.01)
    assert budget.stop_reason(state) == said
    budget.close(state)


def test_the_last_update_takes_what_is_left_so_the_run_never_draws_past_its_samples(problem, tmp_path, capsys):
    """10 samples at 4 an update: updates of 4, 4 and 2 (not a third of 4, which took 12 and left
    the phases after the learner, the plans, less than their share)."""
    result = _train(problem, tmp_path, 10)
    assert result.summary["samples"] == 10 and result.summary["stopped_early"] is None
    assert "10/10" in _last_line(capsys.readouterr().err)
