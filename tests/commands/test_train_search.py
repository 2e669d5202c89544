"""`placer train` on a described cluster with a sample count: local search's own run first (the
`local_search` warm start), the learner with what it leaves; never slower than the `local_search`
baseline at the same --samples, every simulated placement counted."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.cli import main

EXHAUSTED = "local search used all {} samples without reaching a local optimum; no samples were left to learn with"


def _branches_model_file(path, branches: int, depth: int):
    """`branches` parallel chains of `depth` Conv+Relu from one input, concatenated: room to spread
    over GPUs, more than a few local search moves to find it (17 ops for 4 x 2, 37 for 6 x 3)."""
    rng = np.random.default_rng(0)
    nodes, weights, ends = [], [], []
    for b in range(branches):
        x = "x"
        for d in range(depth):
            w = numpy_helper.from_array((rng.standard_normal((32, 3 if d == 0 else 32, 3, 3)) * 0.1).astype(np.float32),
                                        f"w{b}_{d}")
            weights.append(w)
            nodes += [helper.make_node("Conv", [x, w.name], [f"c{b}_{d}"], pads=[1, 1, 1, 1], name=f"conv{b}_{d}"),
                      helper.make_node("Relu", [f"c{b}_{d}"], [f"r{b}_{d}"], name=f"relu{b}_{d}")]
            x = f"r{b}_{d}"
        ends.append(x)
    nodes.append(helper.make_node("Concat", ends, ["y"], axis=1, name="concat"))
    graph = helper.make_graph(nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32 * branches, 32, 32])],
                              weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


# (model shape, cluster, --samples): local search stops at its local optimum after 283 of 400
# samples (the learner gets 117); on the other it still improves at 200 samples (its optimum is at
# 380): given 100 of them, the learner ends 2.5% slower than local search with all 200
REACHES_OPTIMUM = ((6, 3), "paper-2xk40", 400)
RUNS_OUT = ((6, 3), "cpu-fast-slow-gpu", 200)


@pytest.fixture
def trainer_simulated(monkeypatch):
    """The placements the trainer simulates (through its measurement cache), as they are sent."""
    from placer.policy import measurement_cache

    sent, measure_many = [], measurement_cache.measure_many
    monkeypatch.setattr(measurement_cache, "measure_many", lambda m, placements: sent.extend(placements) or
                        measure_many(m, placements))
    return sent


def _run(model, run, samples, cluster, *extra):
    # the placement's phases alone (--space placement): the plans' share would take a fifth of --samples
    return main(["train", "--graph", str(model), "--cluster", cluster, "--reward", "simulated", "--samples",
                 str(samples), "--samples-per-update", "16", "--run-dir", str(run), "--no-progress", "--no-compare",
                 "--space", "placement", *extra])


def _train(tmp_path, case, *extra):
    (branches, depth), cluster, samples = case
    model = _branches_model_file(tmp_path / f"branches{branches}x{depth}.onnx", branches, depth)
    run = tmp_path / "run"
    assert _run(model, run, samples, cluster, *extra) == 0
    return model, run, json.loads((run / "summary.json").read_text())


@pytest.mark.parametrize("case", [REACHES_OPTIMUM, RUNS_OUT], ids=["reaches-optimum", "runs-out"])
def test_the_learned_placement_is_never_slower_than_local_search_at_the_same_samples(tmp_path, case):
    model, run, summary = _train(tmp_path, case)
    _, cluster, samples = case
    # the baseline as compare runs it, at the learner's --samples, through the same simulator
    assert main(["compare", "--graph", str(model), "--cluster", cluster, "--placers", "local_search,heft",
                 "--include-rl", str(run), "--samples", str(samples), "--json", "--no-plot",
                 "--out", str(tmp_path / "compared")]) == 0
    rows = {r["name"]: r["step_time_s"] for r in json.loads((tmp_path / "compared" / "compare.json").read_text())["rows"]}
    assert rows["learned"] <= rows["local_search"] < rows["heft"]
    assert summary["best_step_time"] == rows["learned"]


def test_every_phase_counts_in_the_samples_and_the_budget_holds(tmp_path, trainer_simulated):
    _, _, summary = _train(tmp_path, REACHES_OPTIMUM)
    searched, phases = summary["local_search_warm_start"], summary["samples_by_phase"]
    assert phases["local_search"] == searched["samples"] > 0
    # REINFORCE's: its batches and what it simulated besides them (the single devices, its greedy placements)
    assert phases["reinforce"] > 16 * summary["updates"] and len(trainer_simulated) <= phases["reinforce"]
    assert summary["samples"] == sum(phases.values()) == summary["samples_by_reward"]["simulated"]
    assert summary["samples"] <= REACHES_OPTIMUM[2]
    assert summary["polish"]["samples"] == phases["polish"]


def test_a_local_search_that_spends_the_budget_leaves_nothing_to_learn_and_says_so(tmp_path, capsys,
                                                                                   trainer_simulated):
    from placer.placement import Placement

    _, run, summary = _train(tmp_path, RUNS_OUT)
    assert trainer_simulated == []   # not even the single devices or the policy's own placement
    printed = capsys.readouterr().out
    said = EXHAUSTED.format(RUNS_OUT[2])
    assert summary["note"] == said and said in printed
    assert summary["local_search_warm_start"]["local_optimum"] is False
    assert summary["samples_by_phase"] == {"local_search": RUNS_OUT[2], "reinforce": 0, "polish": 0}
    assert summary["samples"] == RUNS_OUT[2] and summary["best_source"] == "local search (warm start)"
    assert Placement.load(run / "placement.json").extra["source"] == "local search (warm start)"


def test_a_local_search_at_its_optimum_early_leaves_the_rest_to_reinforce(tmp_path, capsys):
    _, _, summary = _train(tmp_path, REACHES_OPTIMUM)
    searched, phases = summary["local_search_warm_start"], summary["samples_by_phase"]
    assert searched["local_optimum"] is True and searched["samples"] < REACHES_OPTIMUM[2]
    assert phases["reinforce"] > 0 and summary["updates"] > 0
    assert summary["note"] is None and "no samples were left" not in capsys.readouterr().out
    assert summary["warm_start"]["source"] == "local_search"


def test_the_local_search_warm_start_needs_a_cluster_and_a_sample_count(tmp_path, capsys):
    model = _branches_model_file(tmp_path / "b.onnx", 2, 1)
    assert main(["train", "--graph", str(model), "--cluster", "paper-2xk40", "--reward", "simulated",
                 "--budget", "1s", "--warm-start", "local_search", "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--warm-start local_search" in err and "--samples" in err


def test_a_resumed_run_retraces_the_same_search_and_learns_with_the_samples_added(tmp_path):
    model, run, first = _train(tmp_path, RUNS_OUT)
    (_, cluster, samples) = RUNS_OUT
    assert main(["train", "--graph", str(model), "--cluster", cluster, "--reward", "simulated", "--samples",
                 str(samples + 100), "--samples-per-update", "16", "--run-dir", str(run), "--no-progress",
                 "--no-compare", "--resume"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["local_search_warm_start"] == first["local_search_warm_start"]   # its budget stays the first --samples
    assert summary["samples_by_phase"]["reinforce"] > 0 and summary["samples"] <= samples + 100
    assert summary["note"] is None


class Polishes:
    """Each polish (local search from a learned placement): its simulated placements, and the
    budget of one Ctrl-C cut short as it started (`interrupt`)."""

    def __init__(self) -> None:
        self.simulated: list[int] = []
        self.cut_short: list[int] = []
        self.interrupt = False


@pytest.fixture
def polishes(monkeypatch):
    import importlib

    module = importlib.import_module("placer.placers.local_search")
    seen, search = Polishes(), module.local_search

    def spied(*args, start=None, samples, **kw):
        if start is not None and seen.interrupt:
            seen.interrupt = False
            seen.cut_short.append(samples)
            raise KeyboardInterrupt
        placement = search(*args, start=start, samples=samples, **kw)
        if start is not None:
            seen.simulated.append(placement.extra["placer"]["simulated"])
        return placement
    monkeypatch.setattr(module, "local_search", spied)
    return seen


def test_a_run_resumed_with_more_samples_after_its_polish_counts_the_earlier_polish(tmp_path, polishes):
    model, run, first = _train(tmp_path, REACHES_OPTIMUM)
    assert polishes.simulated == [first["polish"]["samples"]] and polishes.simulated[0] > 0
    more = REACHES_OPTIMUM[2] + 100
    assert _run(model, run, more, REACHES_OPTIMUM[1], "--resume") == 0
    summary = json.loads((run / "summary.json").read_text())
    phases = summary["samples_by_phase"]
    assert phases["reinforce"] > first["samples_by_phase"]["reinforce"]   # the learner moved on: a new polish
    assert len(polishes.simulated) == 2 and phases["polish"] == sum(polishes.simulated) == summary["polish"]["samples"]
    assert summary["samples"] == sum(phases.values()) <= more


def test_a_polish_cut_short_counts_at_its_budget_unless_the_resumed_run_retraces_it(tmp_path, polishes):
    (branches, depth), cluster, samples = REACHES_OPTIMUM
    model = _branches_model_file(tmp_path / "b.onnx", branches, depth)
    assert _run(model, tmp_path / "whole", samples, cluster) == 0
    whole = json.loads((tmp_path / "whole" / "summary.json").read_text())
    for run in (tmp_path / "same", tmp_path / "more"):
        polishes.interrupt = True
        assert _run(model, run, samples, cluster) == 130
    # the learner where it was: the polish runs again from the same placement, and counts once
    polishes.simulated.clear()
    assert _run(model, tmp_path / "same", samples, cluster, "--resume") == 0
    summary = json.loads((tmp_path / "same" / "summary.json").read_text())
    assert polishes.simulated == [whole["polish"]["samples"]]
    assert summary["samples_by_phase"] == whole["samples_by_phase"] and summary["best_step_time"] == whole["best_step_time"]
    # with more samples the learner moves on: the polish cut short counts at its whole budget beside the new one
    polishes.simulated.clear()
    assert _run(model, tmp_path / "more", samples + 100, cluster, "--resume") == 0
    summary = json.loads((tmp_path / "more" / "summary.json").read_text())
    assert summary["samples_by_phase"]["polish"] == polishes.cut_short[1] + sum(polishes.simulated)
    assert summary["samples"] == sum(summary["samples_by_phase"].values()) <= samples + 100


def test_a_resumed_learner_leaves_the_samples_an_earlier_polish_spent(tmp_path, polishes):
    (branches, depth), cluster, samples = REACHES_OPTIMUM
    model = _branches_model_file(tmp_path / "b.onnx", branches, depth)
    run = tmp_path / "run"
    assert _run(model, run, samples, cluster, "--polish", "0.9") == 0   # most of what local search leaves
    assert _run(model, run, samples + 50, cluster, "--polish", "0.1", "--resume") == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["samples_by_phase"]["polish"] == sum(polishes.simulated)
    assert summary["samples"] == sum(summary["samples_by_phase"].values()) <= samples + 50
