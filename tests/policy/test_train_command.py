"""`placer train` end to end: simulated for speed, and once for real on a small zoo model."""

from __future__ import annotations

import dataclasses
import json

import pytest

from placer.cli import main
from placer.commands.train import parse_budget
from placer.placement import Placement

FAST = ["--hidden-size", "16", "--samples-per-update", "4", "--no-progress", "--devices", "cpu:0,cpu:1"]
QUIET = [*FAST, "--no-compare"]   # no closing comparison: it measures every baseline for real


@pytest.fixture
def quick_closing(monkeypatch):
    """The closing comparison's real rounds cut short (no warm-up, 6 rounds a block; its blocks
    stay): the rounds protocol it was given, one per comparison, is in the list returned."""
    import placer.jobs.compare as compare_job

    given = []
    whole = compare_job.comparison_for_run

    def quick(graph, devices, cost, run_dir, rounds, **options):
        given.append(rounds)
        return whole(graph, devices, cost, run_dir, dataclasses.replace(rounds, warmup=0, min_rounds=6, max_rounds=6),
                     **options)

    monkeypatch.setattr(compare_job, "comparison_for_run", quick)
    return given


def test_a_simulated_run_leaves_a_complete_run_folder(model_file, tmp_path, capsys):
    run = tmp_path / "run"
    code = main(["train", "--graph", str(model_file), "--reward", "simulated", "--cost-model", "analytic", "--samples", "8",
                 "--run-dir", str(run), "--groups", "4", *QUIET])
    out = capsys.readouterr().out
    assert code == 0
    assert "speedup over the best single device" in out and "single device cpu:0" in out
    for name in ("checkpoint.pt", "placement.json", "summary.json"):
        assert (run / name).is_file(), name
    assert list(run.glob("events.out.tfevents.*"))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["samples"] == 8 and summary["speedup_vs_best_single_device"] >= 1.0
    # The 4 groups asked for, split where the warm start's baseline placement cuts them.
    assert summary["grouping"] == "partition+aligned" and summary["groups"] >= 4
    assert summary["objective"] == {"objective": "inference"}
    assert summary["warm_start"]["source"] and summary["greedy"]["step_time"] > 0
    assert (run / "greedy_placement.json").is_file()
    assert Placement.load(run / "placement.json").graph_sha256 == summary["graph_sha256"]


def test_resume_continues_a_run_to_its_sample_count(model_file, tmp_path, capsys):
    run = tmp_path / "run"
    args = ["train", "--graph", str(model_file), "--reward", "simulated", "--cost-model", "analytic", "--run-dir", str(run), *QUIET]
    assert main(args + ["--samples", "4"]) == 0
    assert main(args + ["--samples", "12", "--resume"]) == 0
    assert json.loads((run / "summary.json").read_text())["samples"] == 12


def test_user_mistakes_are_one_line_errors(model_file, tmp_path, capsys):
    run = tmp_path / "run"
    base = ["train", "--graph", str(model_file), "--reward", "simulated", "--cost-model", "analytic", *QUIET]
    assert main(base + ["--run-dir", str(run), "--resume", "--samples", "4"]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert main(base + ["--run-dir", str(run), "--samples", "4"]) == 0
    assert main(base + ["--run-dir", str(run), "--samples", "4"]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(base + ["--run-dir", str(tmp_path / "b"), "--budget", "soon"]) == 2
    assert "budget" in capsys.readouterr().err
    assert main(base + ["--run-dir", str(tmp_path / "c"), "--samples", "4", "--grouping", "nodes",
                        "--groups", "0"]) == 2


def test_budgets_read_seconds_minutes_and_hours():
    assert parse_budget("90s") == 90 and parse_budget("10m") == 600 and parse_budget("1.5h") == 5400
    assert parse_budget("42") == 42


def test_a_real_run_on_a_small_zoo_model_measures_and_confirms(tmp_path, capsys, quick_closing):
    """Real measurement: the executor runs every placement on two virtual CPU devices."""
    import graphs

    model = graphs.export("rnnlm", tmp_path / "rnnlm.onnx", batch=2, seq_len=3, vocab=50)
    run = tmp_path / "run"
    code = main(["train", "--graph", str(model), "--samples", "4", "--warmup", "0", "--repeats", "1",
                 "--run-dir", str(run), *FAST])
    assert code == 0
    out = capsys.readouterr().out
    # It ends with every baseline, random search and its own placements measured side by side: the
    # table in the run folder, its summary last on the screen.
    table = (run / "compare" / "table.txt").read_text()
    for row in ["m_sct", "m_etf", "random_search", "learned_greedy", "learning is worth"]:
        assert row in table, row
    assert out.rstrip().splitlines()[-1].endswith(str(run / "compare" / "table.txt"))
    assert "learning is worth" in out and "fastest: " in out
    assert (run / "compare" / "compare.json").is_file()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["measurer"]["kind"] == "RealMeasurer" and summary["confirmed_side_by_side"]
    times = list(summary["single_device_step_times"].values())
    assert all(t is not None and t > 0 for t in times)
    # the learner's best was measured while it learned, the single devices in the closing rounds: real
    # timings of different moments, which another process can put either way, so only their presence
    assert summary["best_step_time"] > 0
    placement = Placement.load(run / "placement.json")
    # confirmed side by side in interleaved rounds: a median over rounds with its interval
    assert placement.measurement["ok"] and placement.measurement["protocol"]["rounds_run"] >= 6
    assert placement.measurement["interval"]["low"] <= placement.measurement["step_time"] <= \
        placement.measurement["interval"]["high"]


def test_simulated_reward_reports_real_measurements(model_file, tmp_path, capsys):
    """Learning in the (analytic) simulator; the printed and saved figures are real measurements."""
    run = tmp_path / "run"
    assert main(["train", "--graph", str(model_file), "--reward", "simulated", "--cost-model", "analytic",
                 "--samples", "16", "--warmup", "0", "--repeats", "1", "--run-dir", str(run), *QUIET]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["reward"] == "simulated" and summary["simulator"]["protocol"]["cost_model"] == "AnalyticCostModel"
    assert summary["measurer"]["kind"] == "RealMeasurer" and summary["confirmed_side_by_side"]
    assert summary["during_training"]["reward"] == "simulated" and summary["simulated_phase"]["samples"] == 16
    placement = Placement.load(run / "placement.json")
    assert placement.measurement["protocol"]["rounds_run"] >= 6 and placement.measurement["step_time"] == \
        summary["best_step_time"]
    # The simulator's figures (analytic: microseconds apart from the real ones) are not the ones reported.
    simulated = summary["simulated_phase"]["simulated_single_device_step_times"]
    assert all(summary["single_device_step_times"][d] != t for d, t in simulated.items())
    assert "16 simulated + 0 real samples" in capsys.readouterr().out


def test_profiled_hybrid_profiles_once_and_reuses_the_cached_profile(model_file, tmp_path, capsys, monkeypatch):
    """The default cost model, end to end: the first run profiles the devices and caches the
    profile; a second run on the same graph and devices reads it back."""
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    # a machine whose speed holds still: on a busy one the cached-profile check may find a small
    # graph's profile stale and retake it (that check has tests of its own, test_calibration)
    monkeypatch.setattr("placer.costmodel.profile_cache.stale_by", lambda *args, **kwargs: {})
    base = ["train", "--graph", str(model_file), "--samples", "16", "--warmup", "0", "--repeats", "1", *QUIET]
    assert main(base + ["--reward", "simulated", "--run-dir", str(tmp_path / "a")]) == 0
    assert "profiled every op on every device" in capsys.readouterr().out
    profiles = list((tmp_path / "cache" / "profiles").glob("*.json"))
    assert len(profiles) == 1
    written = profiles[0].stat().st_mtime_ns
    assert main(base + ["--reward", "hybrid", "--real-fraction", "0.5", "--run-dir", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert f"profiled costs read from {profiles[0]}" in out and "8 simulated + 8 real samples" in out
    assert profiles[0].stat().st_mtime_ns == written
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["simulator"]["protocol"]["cost_model"] == "ProfiledCostModel"
    assert summary["switched_to_real_at_sample"] == 8 and summary["samples_by_reward"] == {"simulated": 8, "real": 8}
    assert [h["phase"] for h in summary["learning_curve"]] == ["simulated"] * 2 + ["real"] * 2


def test_a_bad_real_fraction_is_a_one_line_error(model_file, tmp_path, capsys):
    assert main(["train", "--graph", str(model_file), "--reward", "hybrid", "--real-fraction", "1.5",
                 "--samples", "4", "--run-dir", str(tmp_path / "r"), *QUIET]) == 2
    assert "--real-fraction" in capsys.readouterr().err


def test_a_pipelined_run_learns_measures_and_compares_the_pipelined_step(model_file, tmp_path, capsys, quick_closing):
    """--micro-batches 4: the simulated samples, the confirmation and the closing comparison are
    all of the pipelined step (four micro-batches per step)."""
    run = tmp_path / "run"
    assert main(["train", "--graph", str(model_file), "--reward", "simulated", "--cost-model", "analytic",
                 "--samples", "8", "--warmup", "0", "--repeats", "1", "--micro-batches", "4", "--run-dir", str(run),
                 *FAST]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["simulator"]["protocol"]["micro_batches"] == 4
    placement = Placement.load(run / "placement.json")
    assert placement.measurement["protocol"]["micro_batches"] == 4       # confirmed on the pipelined step
    compared = json.loads((run / "compare" / "compare.json").read_text())
    assert compared["micro_batches"] == 4 and {"pipeline_dp", "pipeline_balanced"} <= {r["name"] for r in compared["rows"]}
    assert "micro-batches/s" in (run / "compare" / "table.txt").read_text()
    assert main(["train", "--graph", str(model_file), "--micro-batches", "4", "--workers", "2",
                 "--run-dir", str(tmp_path / "w"), *QUIET]) == 2


def test_a_pipelined_run_in_onnxruntime_confirms_the_pipelined_step_there(model_file, tmp_path, monkeypatch):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    assert main(["train", "--graph", str(model_file), "--engine", "onnxruntime", "--reward", "simulated",
                 "--micro-batches", "4", "--samples", "4", "--warmup", "0", "--repeats", "1", "--run-dir", str(run),
                 *QUIET]) == 0
    protocol = Placement.load(run / "placement.json").measurement["protocol"]
    assert protocol["engine"] == "onnxruntime" and protocol["micro_batches"] == 4
    assert json.loads((run / "summary.json").read_text())["simulator"]["protocol"]["micro_batches"] == 4


def test_a_run_in_onnxruntime_profiles_learns_and_confirms_there(model_file, tmp_path, monkeypatch, capsys,
                                                                  quick_closing):
    """--engine onnxruntime: the profile is ONNX Runtime's, the confirmation and the closing
    comparison run every placement in it; the training objective is refused in one line."""
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    assert main(["train", "--graph", str(model_file), "--engine", "onnxruntime", "--reward", "simulated",
                 "--samples", "8", "--warmup", "0", "--repeats", "1", "--run-dir", str(run), *FAST]) == 0
    # the model's profile, and its batch shards' (plan_search's predictions in the closing comparison)
    profiles = list((tmp_path / "cache" / "profiles").glob("*.json"))
    assert profiles and all(json.loads(p.read_text())["protocol"]["engine"] == "onnxruntime" for p in profiles)
    placement = Placement.load(run / "placement.json")
    assert placement.measurement["protocol"]["engine"] == "onnxruntime"
    compared = json.loads((run / "compare" / "compare.json").read_text())
    assert compared["info"]["engine"] == "onnxruntime"
    assert all(r["measurement"]["protocol"]["engine"] == "onnxruntime" for r in compared["rows"] if r["measurement"])
    capsys.readouterr()
    assert main(["train", "--graph", str(model_file), "--engine", "onnxruntime", "--objective", "training",
                 "--run-dir", str(tmp_path / "t"), *QUIET]) == 2
    assert "torch engine" in capsys.readouterr().err


def test_the_closing_comparison_measures_as_compare_does_by_default(model_file, tmp_path, capsys, quick_closing):
    """The closing comparison is `placer compare --include-rl` with no rounds options: compare's
    rounds protocol (its blocks: intervals that hold the variation between runs), the run's seed,
    and compare's verdicts. Each block's rounds are cut short here, for speed; the blocks stay."""
    import placer.jobs.compare as compare_job
    from placer.cli import build_parser
    from placer.commands.common import rounds_from_args
    from placer.measure.intervals import Interval, speedup_verdict

    run = tmp_path / "run"
    assert main(["train", "--graph", str(model_file), "--reward", "simulated", "--cost-model", "analytic",
                 "--samples", "4", "--seed", "3", "--run-dir", str(run), *FAST]) == 0
    compare_defaults = rounds_from_args(build_parser("compare").parse_args(["compare", "--graph", str(model_file)]),
                                        seed=3)
    assert quick_closing == [compare_defaults] and compare_defaults.blocks == compare_job.BLOCKS > 1
    compared = json.loads((run / "compare" / "compare.json").read_text())
    assert compared["rounds"]["blocks"] == compare_job.BLOCKS
    judged = [r for r in compared["rows"] if r["speedup_vs_fastest_interval"] and r["name"] != compared["fastest"]]
    assert judged and all(
        r["vs_fastest_verdict"] == speedup_verdict(Interval.from_dict(r["speedup_vs_fastest_interval"])) for r in judged)
    assert "a verdict is faster or slower when its whole interval lies beyond 2%" in \
        (run / "compare" / "table.txt").read_text()
