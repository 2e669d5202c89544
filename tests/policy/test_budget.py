"""The sample ledger every phase of a run draws from (`placer.policy.budget.SampleBudget`): one
split rule, phases in order, set-asides for later phases, and earlier sessions' draws kept."""

from __future__ import annotations

from placer.policy.budget import (FINE_TUNE, GREEDY_END, LOCAL_SEARCH, POLISH, REINFORCE, ZERO_SHOT, SampleBudget,
                                  learner_share)


def test_the_learner_gets_what_the_phases_before_it_leave_less_the_polish_share():
    budget = SampleBudget(100, polish=0.5)
    budget.draw(LOCAL_SEARCH, 30)
    assert budget.allowance(REINFORCE) == learner_share(70, 0.5) == 35
    budget.set_drawn(REINFORCE, 33)   # the learner stops where its next update would not fit
    assert budget.allowance(POLISH) == 100 - 30 - 33 == budget.remaining(POLISH)
    budget.draw(POLISH, 37)
    assert budget.left() == 0 and budget.spent == 100


def test_a_share_rounds_in_the_learners_favour():
    assert learner_share(7, 0.5) == 4 and learner_share(10, 0.75) == 3 and learner_share(10, 0.0) == 10


def test_samples_set_aside_for_a_later_phase_are_kept_out_of_the_earlier_ones():
    budget = SampleBudget(100, polish=0.75)
    budget.reserve(GREEDY_END, 4)
    budget.draw(ZERO_SHOT, 6)
    assert budget.allowance(FINE_TUNE) == learner_share(90, 0.75) == 23
    budget.draw(FINE_TUNE, 22)
    assert budget.allowance(POLISH) == 100 - 6 - 22 - 4
    budget.draw(POLISH, budget.remaining(POLISH))
    assert budget.remaining(GREEDY_END) == 4 and budget.left() == 4


def test_what_a_later_phase_drew_in_an_earlier_session_stays_counted_when_the_learner_goes_on():
    """A run resumed with more samples after its polish: the learner may not take the polish's samples back."""
    first = SampleBudget(100, polish=0.9)
    first.draw(LOCAL_SEARCH, 10)
    first.set_drawn(REINFORCE, first.allowance(REINFORCE))   # 9
    first.draw(POLISH, first.remaining(POLISH))              # 81
    resumed = SampleBudget.resumed(first.to_dict(), 150, 0.1)
    assert resumed.allowance(REINFORCE) == min(learner_share(140, 0.1), 140 - 81) == 59
    resumed.set_drawn(REINFORCE, 59)
    assert resumed.remaining(POLISH) == 0 and resumed.spent == 150


def test_the_ledger_reads_back_exactly_and_a_run_by_time_counts_nothing_against_it():
    budget = SampleBudget(80, 0.5, {LOCAL_SEARCH: 12, REINFORCE: 20}, {GREEDY_END: 3})
    assert SampleBudget.from_dict(budget.to_dict()) == budget
    assert SampleBudget(None).allowance(REINFORCE) is None and SampleBudget(None).left() is None
    assert budget.by_phase(LOCAL_SEARCH, REINFORCE, POLISH) == {LOCAL_SEARCH: 12, REINFORCE: 20, POLISH: 0}
