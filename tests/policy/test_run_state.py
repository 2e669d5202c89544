"""When a run counts as settled, and how it keeps its fastest placements."""

from __future__ import annotations

from placer.measure.measurement import Measurement
from placer.policy.run_state import TOP_K, TrainState


def settled_state(greedy_ms: float, best_ms: float, entropy: float = 0.01, repeated: float = 1.0) -> TrainState:
    state = TrainState()
    state.consider([0, 1], Measurement(ok=True, step_time=best_ms / 1e3), "policy")
    state.greedy = {"group_devices": [1, 1], "step_time": greedy_ms / 1e3}
    state.history.append({"entropy_per_group": entropy, "repeated": repeated})
    return state


def test_a_converged_policy_that_only_repeats_its_best_placement_is_settled():
    assert settled_state(greedy_ms=10.0, best_ms=10.0).settled()


def test_a_converged_policy_whose_own_placement_is_slower_than_the_best_known_is_not_settled():
    assert not settled_state(greedy_ms=10.2, best_ms=10.0).settled()


def test_exploring_or_measuring_new_placements_is_not_settled():
    assert not settled_state(10.0, 10.0, entropy=0.3).settled()
    assert not settled_state(10.0, 10.0, repeated=0.95).settled()
    assert not TrainState().settled()


def test_the_best_and_the_top_k_distinct_placements_are_kept():
    state = TrainState()
    for i, ms in enumerate([9.0, 7.0, 8.0, 7.0, 6.0, 5.0, 11.0, 4.0]):
        state.consider([i % 7], Measurement(ok=True, step_time=ms), "policy")
    state.consider([99], Measurement(ok=False, failure="oom"), "policy")
    assert state.best["step_time"] == 4.0 and len(state.top) == TOP_K
    assert [t["step_time"] for t in state.top] == sorted(t["step_time"] for t in state.top)
    assert len({tuple(t["group_devices"]) for t in state.top}) == TOP_K
