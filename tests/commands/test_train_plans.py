"""`placer train` searches plans by default (`--space plans`), on a cluster and on this machine's
devices: the plans users run and REINFORCE over plans from the learned placement, every plan priced
counted in --samples, and plan.json where a plan beats the placement; `--space placement` keeps to
whole ops."""

from __future__ import annotations

import json

import pytest

import onnx

from placer.cli import main
from testgraphs import branches, tiny_conv_file

SAMPLES = 200


def _train(tmp_path, *extra):
    tmp_path.mkdir(exist_ok=True)
    # one chain of four 1024-wide MatMuls on a batch of 512: no placement of whole ops runs it on two
    # GPUs at once, and splitting the batch over four is about 4x faster (simulated, exact)
    model = tmp_path / "chain.onnx"
    onnx.save(branches(1, 4, width=1024, batch=512), model)
    run = tmp_path / "run"
    code = main(["train", "--graph", str(model), "--cluster", "4xa100-nvlink", "--reward", "simulated", "--samples",
                 str(SAMPLES), "--samples-per-update", "8", "--run-dir", str(run), "--no-progress", "--no-compare",
                 *extra])
    assert code == 0
    return model, run, json.loads((run / "summary.json").read_text())


@pytest.fixture
def plans_simulated(monkeypatch):
    """Every plan simulated, by the rows of the plans users run and by the search's scorer."""
    from placer.evaluate import plan_rows
    from placer.plans import scoring

    seen = []
    for module, name in ((plan_rows, "simulate_plan"), (plan_rows, "simulate_training"),
                         (scoring, "simulate_plan"), (scoring, "simulate_training")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda graph, plan, *a, _real=real, **k: seen.append(plan) or
                            _real(graph, plan, *a, **k))
    return seen


@pytest.mark.parametrize("objective", ["inference", "training"])
def test_a_run_on_a_cluster_ends_with_a_plan_that_splits_the_batch_and_counts_in_the_samples(tmp_path, capsys,
                                                                                              plans_simulated, objective):
    from placer.plans.plan import Plan

    model, run, summary = _train(tmp_path, "--objective", objective)
    plan, phases = summary["plan"], summary["samples_by_phase"]
    assert plan["file"] == "plan.json" and plan["split_ops"] > 0
    assert plan["step_time"] < plan["placement_step_time"] == summary["best_step_time"]
    assert plan["step_time"] <= plan["fastest_user_plan_step_time"]   # never slower than DDP, where it starts
    assert phases["plans"] == plan["samples"] >= len(plans_simulated) > 1
    assert summary["samples"] == sum(phases.values()) <= SAMPLES
    printed = capsys.readouterr().out
    assert f"{plan['vs_placement']:.2f}x faster than the learned placement" in printed
    assert "+ {} plans of {}".format(phases["plans"], SAMPLES) in printed
    found = Plan.load(run / "plan.json")
    assert sum(1 for op in found.ops.values() if not op.whole) == plan["split_ops"]
    # what apply takes: the plan written into the model as sharding specs
    out = tmp_path / "placed.onnx"
    assert main(["apply", "--graph", str(model), "--placement", str(run / "plan.json"), "--cluster", "4xa100-nvlink",
                 "-o", str(out)]) == 0
    assert out.exists()


def test_space_placement_keeps_to_whole_ops_and_its_samples(tmp_path):
    _, run, summary = _train(tmp_path, "--space", "placement")
    assert "plan" not in summary and not (run / "plan.json").exists()
    assert "plans" not in summary["samples_by_phase"]


@pytest.mark.parametrize("argv, said", [
    (["--space", "plans", "--cluster", "4xa100-nvlink", "--policy", "pretrained"], "the graph policy places whole ops"),
])
def test_space_plans_where_it_cannot_search_is_one_line(tmp_path, capsys, argv, said):
    model = tiny_conv_file(tmp_path / "tiny.onnx")
    assert main(["train", "--graph", str(model), "--samples", "50", "--run-dir", str(tmp_path / "run"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0]


def test_a_run_cut_in_its_plan_search_resumes_to_the_same_plan_and_samples(tmp_path, monkeypatch, capsys):
    """Ctrl-C inside the plan search: the run says how to resume, and --resume ends where an uncut run ends."""
    from placer.policy import plan_reinforce

    _, uncut, whole = _train(tmp_path / "uncut")
    real, cuts = plan_reinforce.plan_reinforce, []

    def cut_once(*args, **kwargs):
        if not cuts:
            cuts.append(1)
            raise KeyboardInterrupt   # as if Ctrl-C landed here
        return real(*args, **kwargs)

    monkeypatch.setattr(plan_reinforce, "plan_reinforce", cut_once)
    model = tmp_path / "uncut" / "chain.onnx"
    run = tmp_path / "cut"
    argv = ["train", "--graph", str(model), "--cluster", "4xa100-nvlink", "--reward", "simulated", "--samples",
            str(SAMPLES), "--samples-per-update", "8", "--run-dir", str(run), "--no-progress", "--no-compare"]
    assert main(argv) == 130
    assert "--resume" in capsys.readouterr().out and not (run / "plan.json").exists()
    assert main([*argv, "--resume"]) == 0
    resumed = json.loads((run / "summary.json").read_text())
    assert resumed["plan"]["step_time"] == whole["plan"]["step_time"]
    assert resumed["samples_by_phase"] == whole["samples_by_phase"] and resumed["samples"] == whole["samples"]
    assert (run / "plan.json").read_text() == (uncut / "plan.json").read_text()


@pytest.mark.parametrize("fastest, written, objective", [("data_parallel", True, "inference"),
                                                         ("learned placement", False, "inference"),
                                                         ("data_parallel", True, "training")])
def test_a_run_on_this_machine_measures_its_plans_and_keeps_the_fastest_measured(tmp_path, monkeypatch, fastest,
                                                                                  written, objective):
    """On this machine's devices the plan search predicts plans from the profile, then measures its
    finalists (the learned placement among them) for real, training steps on the training
    objective, and keeps the fastest measured (the measurements stubbed here: the test must not
    hang on this machine's timing)."""
    from placer.evaluate import plan_finalists
    from placer.placement import Placement
    from placer.plans.plan import Plan

    measured = {}

    def fake_measure(plans, measurer):
        assert (measurer.training is not None) == (objective == "training")
        measured.update(plans)
        return {name: 0.001 if name == fastest else 0.002 for name in plans}

    monkeypatch.setattr(plan_finalists, "measure_finalists", fake_measure)
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = tiny_conv_file(tmp_path / "tiny.onnx", batch=4)
    run = tmp_path / "run"
    assert main(["train", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--reward",
                 "simulated", "--samples", "120", "--samples-per-update", "8", "--run-dir",   # plans: the default
                 str(run), "--no-progress", "--no-compare", "--objective", objective]) == 0
    summary = json.loads((run / "summary.json").read_text())
    plan, phases = summary["plan"], summary["samples_by_phase"]
    assert {"learned placement", "data_parallel"} <= set(measured) and plan["kept"] == fastest
    assert phases["plans"] == plan["samples"] == plan["predicted"] + len(measured)
    assert summary["samples_by_reward"]["real"] == len(measured)
    assert summary["samples"] == sum(phases.values()) <= 120
    assert (run / "plan.json").exists() == written and plan["file"] == ("plan.json" if written else None)
    if written:
        assert plan["step_time"] == 0.001 and plan["vs_placement"] == 2.0
        assert Plan.load(run / "plan.json").ops == measured["data_parallel"].ops
    else:
        assert Placement.load(run / "placement.json").nodes == measured["learned placement"].to_placement().nodes



@pytest.mark.parametrize("samples, described, reserved", [(20, False, None), (35, False, 7), (20, True, 4),
                                                          (4, True, None)])
def test_the_plans_share_is_set_aside_only_where_it_holds_a_search(samples, described, reserved):
    """A fifth of --samples goes to the plans where it holds the least a search needs: on this
    machine's devices one plan predicted and the finalists measured (7), on a cluster one plan."""
    from placer.jobs import plan_phase
    from placer.jobs.plan_phase_here import least_samples
    from placer.policy.budget import PLANS, REINFORCE, SampleBudget

    budget = SampleBudget(samples)
    plan_phase.reserve(budget, True, least=1 if described else least_samples())
    assert budget.reserved.get(PLANS) == reserved
    assert budget.allowance(REINFORCE) == samples - (reserved or 0)


def test_a_plan_search_here_without_the_samples_it_needs_says_so_in_one_line():
    from types import SimpleNamespace

    from placer.jobs.plan_phase_here import search_plans_here
    from placer.policy.budget import REINFORCE, SampleBudget

    budget, said = SampleBudget(20), []
    budget.set_drawn(REINFORCE, 16)
    rows = search_plans_here(None, ["cpu:0", "cpu:1"], None, SimpleNamespace(pipeline=None), None, {}, budget, None,
                             0, report=said.append)
    assert rows == [] and said == ["plans: not searched; --samples leaves 4 for plans, and a search here needs 7 "
                                   "(raise --samples, or --space placement)"]


def test_a_pipelined_run_here_keeps_to_placements_unless_asked(tmp_path, monkeypatch, capsys):
    """Plans are measured here on one step, not a pipelined one: --micro-batches keeps the run to
    placements by default, and --space plans, asked for, says in one line why it searched none."""
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = tiny_conv_file(tmp_path / "tiny.onnx", batch=4)
    argv = ["train", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--reward", "simulated",
            "--micro-batches", "2", "--samples", "40", "--samples-per-update", "4", "--no-progress", "--no-compare"]
    assert main([*argv, "--run-dir", str(tmp_path / "default")]) == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("plans")]
    assert main([*argv, "--run-dir", str(tmp_path / "asked"), "--space", "plans"]) == 0
    assert "plans: not searched; plans are priced on one step, not a pipelined one, so far" in capsys.readouterr().out
