"""`placer compare` end to end: baselines and a training run's placements measured for real on a
tiny model, the files it saves, and --json."""

import json
import re

import pytest

from placer.cli import main
from placer.costmodel.profile_cache import profiled_cost_model
from placer.devices import parse_devices
from placer.graph.feeds import step_feeds
from placer.graph.load import load_graph
from placer.plans.plan import Plan
from placer.plans.pricing import predict_plan
from placer.plans.shard_profile import profile_shards
from testgraphs import tiny_conv_file as _tiny_model_file

DEVICES = ["cpu:0", "cpu:1"]


def test_placer_compare_measures_the_baselines_and_a_learned_placement_for_real(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    from placer.graph.load import load_graph
    from placer.placement import Placement

    graph = load_graph(model)
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    nodes = {n: ("cpu:1" if n.endswith("_b") else "cpu:0") for n in graph.nodes}
    Placement(DEVICES, nodes, graph.sha256).save(run / "placement.json")
    (run / "summary.json").write_text(json.dumps({"wall_time_s": 12.5, "samples": 12, "groups": 2,
                                                  "grouping": "partition"}))

    out = tmp_path / "out"
    code = main(["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]",
                 "--warmup", "0", "--max-rounds", "6", "--min-rounds", "6", "--out", str(out), "--include-rl", str(run), "--no-plot",
                 "--placers", "single,random,metis,m_etf,heft,random_search"])
    assert code == 0
    # the screen: a summary of at most 10 lines, the whole table in the output folder, named last
    printed = capsys.readouterr().out.rstrip().splitlines()
    assert len(printed) <= 10 and printed[0].startswith("fastest: ") and printed[-1].endswith(str(out / "table.txt"))
    assert any(line.startswith("learning is worth: learned") for line in printed)
    table = (out / "table.txt").read_text()
    for name in ("single:cpu:0", "single:cpu:1", "random", "metis", "m_etf", "heft", "random_search", "learned",
                 "lower bound", "learning is worth: learned", "vs random_search (12 samples)"):
        assert name in table
    data = json.loads((out / "compare.json").read_text())
    rows = {r["name"]: r for r in data["rows"]}
    assert all(r["status"] == "ok" and r["step_time_s"] > 0 for r in rows.values())
    assert rows["learned"]["find_time_s"] == 12.5 and rows["learned"]["device_counts"] == {"cpu:0": 3, "cpu:1": 2}
    # random_search drew as many placements as the learner, in the learner's groups.
    searched = Placement.load(out / "placements" / "random_search.json").extra["placer"]
    assert searched["samples"] == 12 and searched["groups"] == 2
    worth = data["learning_vs_random_search"]
    assert worth["learned_step_time_s"] == rows["learned"]["step_time_s"]
    assert worth["learned_samples"] == worth["random_search_samples"] == 12
    assert worth["ratio"] == pytest.approx(rows["random_search"]["step_time_s"] / rows["learned"]["step_time_s"])


def test_placer_compare_runs_random_search_with_the_samples_asked_for(tmp_path, monkeypatch, capsys):
    from placer.placement import Placement

    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    out = tmp_path / "out"
    assert main(["-v", "compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--warmup",
                 "0", "--max-rounds", "6", "--min-rounds", "6", "--out", str(out), "--no-plot", "--placers",
                 "single,random_search", "--samples", "9"]) == 0
    # placer -v: the whole table on the screen too, then the summary
    printed = capsys.readouterr().out
    assert printed.startswith((out / "table.txt").read_text()) and printed.rstrip().endswith(str(out / "table.txt"))
    rows = {r["name"]: r for r in json.loads((out / "compare.json").read_text())["rows"]}
    assert rows["random_search"]["status"] == "ok" and rows["random_search"]["predicted_step_time_s"] > 0
    assert Placement.load(out / "placements" / "random_search.json").extra["placer"]["samples"] == 9
    assert main(["compare", "--graph", str(model), "--samples", "0", "--out", str(out)]) == 2
    assert "--samples must be at least 1" in capsys.readouterr().err


def test_placer_compare_refuses_an_unknown_placer(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    assert main(["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]",
                 "--placers", "single,magic", "--warmup", "0", "--max-rounds", "6", "--min-rounds", "6", "--out", str(tmp_path)]) == 2
    assert "unknown placer(s) magic" in capsys.readouterr().err


def test_placer_compare_json_prints_what_compare_json_holds_and_nothing_else(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    out = tmp_path / "out"
    assert main(["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--warmup", "0",
                 "--max-rounds", "6", "--min-rounds", "6", "--out", str(out), "--no-plot", "--placers", "single,m_etf", "--json"]) == 0
    printed = capsys.readouterr()
    assert printed.out == (out / "compare.json").read_text()
    data = json.loads(printed.out)
    assert data["format"] == "placer.compare/1"
    # the placers' rows, then the control (the single device predicted fastest, again) and what a user
    # runs instead: one device with both threads, and ONNX Runtime; then placer's plan search (a batch of 1
    # leaves data and tensor parallelism nothing to split: notes)
    assert [r["name"] for r in data["rows"]] == ["single:cpu:0", "single:cpu:1", "m_etf", "control",
                                                 "whole_machine", "onnxruntime", "plan_search"]
    assert "saved" in printed.err and "step ms [95%]" not in printed.out   # no table on stdout


def test_placer_compare_on_the_training_objective_measures_every_baseline_on_the_training_step(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    args = ["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--warmup", "0",
            "--max-rounds", "6", "--min-rounds", "6", "--no-plot", "--json", "--placers", "single,m_etf,heft,random_search", "--samples", "8"]
    assert main([*args, "--out", str(tmp_path / "inference")]) == 0
    inference = json.loads(capsys.readouterr().out)
    assert main([*args, "--out", str(tmp_path / "training"), "--objective", "training", "--optimizer", "adam"]) == 0
    training = json.loads(capsys.readouterr().out)
    assert main([a for a in args if a != "--json"] + ["--out", str(tmp_path / "text"), "--objective", "training"]) == 0
    assert "step = training step (forward, loss mse, backward, sgd update)" in (tmp_path / "text" / "table.txt").read_text()
    assert training["info"]["protocol"]["objective"] == "training" and training["info"]["protocol"]["optimizer"] == "adam"
    assert inference["info"]["protocol"]["objective"] == "inference"
    rows = {r["name"]: r for r in training["rows"]}
    # plan_search by default here: its finalists' training steps measured beside the placements
    assert set(rows) == {"single:cpu:0", "single:cpu:1", "m_etf", "heft", "random_search", "control", "whole_machine",
                         "plan_search"}
    for row in rows.values():
        assert row["status"] == "ok" and row["measurement"]["protocol"]["objective"] == "training"
        # whole_machine is not on the compared devices; plan_search's ranking predicts forward steps only
        assert row["name"] in ("whole_machine", "plan_search") or row["predicted_step_time_s"] > 0
    assert rows["plan_search"]["predicted_step_time_s"] is None
    # the bound and the predictions are of the whole training step: backward and update included;
    # two identical devices share its load (at best half each; the calibrated contention of devices
    # that share the machine's memory takes some of that back), a single device runs it all
    single_training = rows["single:cpu:0"]["predicted_step_time_s"]
    assert single_training / 2 * (1 - 1e-9) <= training["lower_bound"]["load"] <= single_training * (1 + 1e-9)
    assert training["lower_bound"]["load"] > inference["lower_bound"]["load"]
    single = {r["name"]: r for r in inference["rows"]}["single:cpu:0"]
    assert rows["single:cpu:0"]["predicted_step_time_s"] > single["predicted_step_time_s"]


def test_placer_compare_in_onnxruntime_measures_every_row_there(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    args = ["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--warmup", "0",
            "--min-rounds", "6", "--max-rounds", "6", "--no-plot", "--placers", "single,m_etf"]
    assert main([*args, "--engine", "onnxruntime", "--json", "--out", str(tmp_path / "ort")]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in data["rows"]}
    # the whole machine is ONNX Runtime's own session here: no second onnxruntime row; placer's plan
    # search runs there too (on a batch of 1, what it finds splits nothing)
    assert list(rows) == ["single:cpu:0", "single:cpu:1", "m_etf", "control", "whole_machine", "plan_search"]
    assert all(r["status"] == "ok" and r["measurement"]["protocol"]["engine"] == "onnxruntime" for r in rows.values())
    assert data["info"]["engine"] == "onnxruntime"
    # the pipelined step there too, the whole machine's session included
    assert main([*args, "--engine", "onnxruntime", "--micro-batches", "4", "--json", "--out", str(tmp_path / "p")]) == 0
    piped = json.loads(capsys.readouterr().out)
    assert piped["micro_batches"] == 4 and [r["name"] for r in piped["rows"]] == list(rows)[:-1]   # no plans piped
    for row in piped["rows"]:
        assert row["status"] == "ok" and row["throughput_per_s"] == pytest.approx(4 / row["step_time_s"])
        assert row["measurement"]["protocol"]["engine"] == "onnxruntime"
        assert row["measurement"]["protocol"]["micro_batches"] == 4
    assert main([*args, "--engine", "onnxruntime", "--objective", "training", "--out", str(tmp_path / "t")]) == 2
    assert "torch engine" in capsys.readouterr().err


def test_placer_compare_of_a_pipelined_step_reports_throughput(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    assert main(["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--warmup", "0",
                 "--min-rounds", "6", "--max-rounds", "6", "--no-plot", "--placers", "single,pipeline_dp",
                 "--micro-batches", "4", "--out", str(tmp_path / "p")]) == 0
    out = (tmp_path / "p" / "table.txt").read_text()
    assert "micro-batches/s" in out and "4 micro-batches pipelined" in out
    data = json.loads((tmp_path / "p" / "compare.json").read_text())
    assert data["micro_batches"] == 4 and {"whole_machine", "onnxruntime"} <= {r["name"] for r in data["rows"]}
    for row in data["rows"]:
        assert row["throughput_per_s"] == pytest.approx(4 / row["step_time_s"])
        # every row, the whole machine and ONNX Runtime's session too (the micro-batches one after another)
        assert row["measurement"]["protocol"]["micro_batches"] == 4


def test_a_single_device_far_off_its_prediction_is_noted():
    """The note compares with what the (calibrated) simulator predicts for the device alone."""
    from types import SimpleNamespace

    from placer.evaluate.compare import CompareRow, profile_drift_notes
    from placer.measure.measurement import Measurement

    def row(name, measured, predicted):
        return CompareRow(name, "single", True, 0.0, measurement=Measurement(ok=True, step_time=measured),
                          predicted_step_time=predicted)

    comparison = SimpleNamespace(rows=[row("single:cpu:0", 0.30, 0.20), row("single:cpu:1", 0.21, 0.20)])
    notes = profile_drift_notes(comparison, cached=True)
    assert len(notes) == 1 and notes[0].startswith(
        "cpu:0 ran the whole graph in 300.0 ms now but the profile predicts 200.0 ms (cached profile)")


def test_placer_compare_measures_in_blocks_and_keeps_a_history_of_its_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    history = tmp_path / "history"
    args = ["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--warmup", "0",
            "--min-rounds", "6", "--max-rounds", "6", "--blocks", "2", "--placers", "single", "--no-plot",
            "--history-dir", str(history)]
    for run in ("first", "second"):
        assert main(args + ["--out", str(tmp_path / run)]) == 0
    printed = (tmp_path / "second" / "table.txt").read_text()
    assert "measured in 2 blocks of interleaved rounds (12 rounds" in printed and "against the previous run (" in printed
    first, second = (json.loads((tmp_path / run / "compare.json").read_text()) for run in ("first", "second"))
    assert second["rounds"]["rounds"] == 12 and second["rounds"]["blocks"] == 2
    assert all(r["measurement"]["interval"]["blocks"] == 2 for r in second["rows"])
    assert first["history"]["previous_run"] is None and second["history"]["previous_run"] is not None
    assert second["history"]["file"] == first["history"]["file"]
    assert len((history / first["history"]["file"].split("/")[-1]).read_text().splitlines()) == 2
    # the default history sits beside the profile cache; --no-history leaves none
    assert main(args[:-2] + ["--out", str(tmp_path / "third")]) == 0
    assert list((tmp_path / "cache" / "compare_history").glob("*.jsonl"))
    assert main(args[:-2] + ["--no-history", "--out", str(tmp_path / "fourth")]) == 0
    assert json.loads((tmp_path / "fourth" / "compare.json").read_text())["history"] is None


def test_placer_compare_refuses_no_blocks_and_a_history_dir_that_is_a_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    (tmp_path / "file").write_text("")
    base = ["compare", "--graph", str(model), "--placers", "single", "--out", str(tmp_path / "out")]
    assert main(base + ["--blocks", "0"]) == 2
    assert main(base + ["--history-dir", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err
    assert "--blocks" in err and "--history-dir" in err and "give a folder" in err


def test_placer_compare_runs_plans_for_real_beside_the_placements(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx", batch=4)
    out = tmp_path / "out"
    argv = ["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--warmup", "0",
            "--max-rounds", "6", "--min-rounds", "6", "--blocks", "1", "--no-plot", "--placers", "single"]
    assert main([*argv, "--out", str(out), "--json", "--plans", "data_parallel,fsdp"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in data["rows"]}
    assert rows["data_parallel"]["status"] == "ok" and rows["data_parallel"]["step_time_s"] > 0
    assert any(n.startswith("fsdp: not measured; on this machine's devices plans run so far") for n in data["notes"])
    # by default the plans that run here, training steps too
    assert main([*argv, "--out", str(tmp_path / "t"), "--json", "--objective", "training"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {r["name"]: r["status"] for r in data["rows"]}["data_parallel"] == "ok"
    # ONNX Runtime runs data parallelism (a session per device), not a plan whose devices talk
    assert main([*argv, "--out", str(tmp_path / "ort"), "--json", "--engine", "onnxruntime", "--plans",
                 "data_parallel,tensor_parallel"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {r["name"]: r["status"] for r in data["rows"]}["data_parallel"] == "ok"
    assert any(n.startswith("tensor_parallel: not measured; ") for n in data["notes"])



def test_placer_compare_searches_plans_on_the_profile_and_measures_what_it_finds(tmp_path, monkeypatch, capsys):
    """On this machine's devices plan_search predicts plans from the profile, from the best of the
    placements and the other plans, and its plan is measured beside them and saved."""
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx", batch=4)
    out = tmp_path / "out"
    argv = ["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--warmup", "0",
            "--max-rounds", "6", "--min-rounds", "6", "--blocks", "1", "--no-plot", "--placers", "single",
            "--samples", "30", "--json"]
    assert main([*argv, "--out", str(out), "--plans", "data_parallel,plan_search"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in data["rows"]}
    row = rows["plan_search"]
    assert row["status"] == "ok" and row["step_time_s"] > 0 and "predicted from the profile" in row["note"]
    assert re.search(r"of its \d fastest predicted, \d measured in 6 rounds and .* kept", row["note"]), row["note"]
    plan = Plan.load(out / "placements" / "plan_search.json")
    graph = load_graph(model)
    devices = parse_devices("cpu:0[threads=1],cpu:1[threads=1]")
    # the cached profile, its batch shards profiled at their own shapes (cached too)
    profile = profile_shards(graph, devices, profiled_cost_model(graph, devices), step_feeds(graph, 0))
    assert plan.graph_sha256 == data["graph_sha256"]
    assert predict_plan(graph, plan, profile).step_time == pytest.approx(row["predicted_step_time_s"], rel=1e-12)
    assert main([*argv, "--out", str(tmp_path / "t"), "--objective", "training", "--plans", "plan_search"]) == 0
    trained = {r["name"]: r for r in json.loads(capsys.readouterr().out)["rows"]}["plan_search"]
    assert trained["status"] == "ok" and "their training steps measured" in trained["note"], trained["note"]


def test_plan_search_on_this_machine_keeps_the_plan_measured_fastest_not_the_one_predicted(tmp_path, monkeypatch,
                                                                                          capsys):
    """The profile mispredicts shards on CPU devices, so plan_search measures its plan and the
    best-predicted starts and keeps the fastest measured: here (measurements stubbed, so the test
    does not hang on this machine's timing) one device's placement, which it predicts the slowest."""
    from placer.evaluate import plan_finalists

    measured = {}

    def fake_measure(plans, measurer):
        measured.update(plans)
        return {name: 1.0 if name == "single:cpu:1" else 2.0 for name in plans}

    monkeypatch.setattr(plan_finalists, "measure_finalists", fake_measure)
    monkeypatch.setenv("PLACER_CACHE", str(tmp_path / "cache"))
    model = _tiny_model_file(tmp_path / "tiny.onnx", batch=4)
    out = tmp_path / "out"
    assert main(["compare", "--graph", str(model), "--devices", "cpu:0[threads=1],cpu:1[threads=1]", "--warmup", "0",
                 "--max-rounds", "6", "--min-rounds", "6", "--blocks", "1", "--no-plot", "--placers", "single",
                 "--samples", "30", "--json", "--out", str(out), "--plans", "data_parallel,plan_search"]) == 0
    row = {r["name"]: r for r in json.loads(capsys.readouterr().out)["rows"]}["plan_search"]
    assert {"single:cpu:0", "single:cpu:1", "data_parallel"} <= set(measured)
    assert "single:cpu:1 kept (1000.0 ms)" in row["note"]
    plan = Plan.load(out / "placements" / "plan_search.json")
    assert plan.is_placement and set(plan.to_placement().nodes.values()) == {"cpu:1"}
