"""summary.json as a typed record (`RunSummary`): written with its schema version, read back by
the same class, older files read the same way, a newer schema refused in one line."""

from __future__ import annotations

import json

import pytest

from placer.errors import PlacerError
from placer.policy.checkpoint import save_summary
from placer.policy.summary_file import SCHEMA, RunSummary


def written(tmp_path, **figures) -> RunSummary:
    summary = RunSummary("seq2seq", "m.onnx", "simulated", 40, {"simulated": 40, "real": 0}, 0.012, "policy greedy",
                         samples_by_phase={"local_search": 10, "reinforce": 20, "polish": 10}, wall_time_s=3.0,
                         grouping="partition", groups=4, details=dict(figures))
    save_summary(tmp_path, summary)
    return summary


def test_the_file_is_the_records_form_with_its_schema_and_reads_back_the_same(tmp_path):
    summary = written(tmp_path, greedy={"step_time": 0.013}, note=None)
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["schema"] == SCHEMA and data["samples"] == 40 and data["greedy"] == {"step_time": 0.013}
    assert RunSummary.read(tmp_path) == summary
    assert RunSummary.read(tmp_path / "placement.json") is None   # no such file: the folder is not read
    (tmp_path / "placement.json").write_text("{}")
    assert RunSummary.read(tmp_path / "placement.json") == summary   # beside a placement file


def test_a_file_from_before_the_schema_reads_with_its_learner_and_its_time(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({
        "graph": "m.onnx", "reward": "simulated", "samples": 30, "samples_by_reward": {"simulated": 30},
        "best_step_time": 0.01, "best_source": "sampled", "seconds": 2.5, "zero_shot_step_time": 0.02}))
    summary = RunSummary.read(tmp_path)
    assert summary.learner == "graph policy" and summary.wall_time_s == 2.5 and summary.samples == 30
    assert summary["zero_shot_step_time"] == 0.02 and "seconds" not in summary


def test_a_newer_schema_or_a_damaged_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"schema": SCHEMA + 1, "samples": 1}))
    with pytest.raises(PlacerError, match="upgrade placer"):
        RunSummary.read(tmp_path)
    (tmp_path / "summary.json").write_text("{not json")
    with pytest.raises(PlacerError, match="not a placer run summary"):
        RunSummary.read(tmp_path)


def test_compare_include_rl_reads_the_runs_samples_and_groups_through_the_record(tmp_path):
    from placer.jobs.compare import _random_search_options
    from testgraphs import branches
    from placer.graph.load import load_graph

    graph = load_graph(branches(2, 2))
    written(tmp_path)
    options = _random_search_options(graph, ["cpu:0", "cpu:1"], tmp_path, None)
    assert options["samples"] == 40 and options["grouping"].method == "partition"
