"""`placer.program.walk`: the last-use rule and the one interpreter loop the reference, the
executor's workers and the simulator share."""

from __future__ import annotations

from placer.program.walk import Step, last_uses, walk

# x, w -> a -> b (with w) -> d; a -> c; b also makes an output nobody reads ("spare")
STEPS = [Step("A", "Relu", ("x",), ("a",)),
         Step("B", "MatMul", ("a", "w"), ("b", "spare")),
         Step("C", "Neg", ("a", ""), ("c",)),
         Step("D", "Relu", ("b",), ("d",))]


def _add_one(i: int, inputs: list) -> list:
    """Every step's outputs: the sum of its inputs plus one (an omitted input is None)."""
    total = sum(v for v in inputs if v is not None) + 1
    return [total] * len(STEPS[i].outputs)


def test_a_value_is_dropped_after_its_last_reader_and_an_unread_output_with_its_step():
    assert last_uses(STEPS, keep={"c", "d"}) == [["x"], ["w", "spare"], ["a"], ["b"]]


def test_kept_values_are_never_dropped():
    frees = last_uses(STEPS, keep={"x", "w", "a", "b", "c", "d", "spare"})
    assert frees == [[], [], [], []]


def test_the_walk_runs_steps_in_order_and_frees_after_the_caller_has_seen_the_outputs():
    env = {"x": 1, "w": 10}
    seen = []
    for i in walk(STEPS, last_uses(STEPS, keep={"c", "d"}), env, _add_one):
        seen.append((STEPS[i].name, sorted(env)))
    assert seen == [("A", ["a", "w", "x"]),
                    ("B", ["a", "b", "spare", "w"]),
                    ("C", ["a", "b", "c"]),
                    ("D", ["b", "c", "d"])]
    assert env == {"c": 3, "d": 14}


def test_a_value_missing_from_the_environment_is_fetched_on_its_first_read():
    fetched = []

    class Inbox(dict):
        def __missing__(self, name):
            fetched.append(name)
            value = self[name] = 100
            return value

    env = Inbox()
    for _ in walk(STEPS, last_uses(STEPS, keep={"c", "d"}), env, _add_one):
        pass
    assert fetched == ["x", "w"]
    assert dict(env) == {"c": 102, "d": 203}
