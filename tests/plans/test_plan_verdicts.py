"""A simulated comparison names its fastest plan row in its verdicts and notes, as it names the whole
machine and ONNX Runtime, and never takes a plan for a placement."""

from __future__ import annotations

from placer.devices import as_devices
from placer.evaluate.compare import best_placement
from placer.evaluate.report import summary_lines
from placer.hardware import load_cluster
from placer.jobs.compare import simulated_comparison
from plancases import conv_net


def test_the_fastest_plan_is_a_verdict_and_what_to_use_when_it_beats_every_placement():
    cluster, graph = load_cluster("4xa100-nvlink"), conv_net(batch=64, size=64, channels=64)
    comparison = simulated_comparison(graph, as_devices(cluster.device_specs()), cluster, ["single", "m_etf"], None,
                                      None, 0, plans=("pipeline_data", "data_parallel"))
    plans = [comparison.row("pipeline_data"), comparison.row("data_parallel")]
    fastest = min(plans, key=lambda r: r.step_time)
    assert fastest.name == "data_parallel"   # a quarter of the batch each, against half in two stages
    verdict = next(v for v in comparison.verdicts if v["reference"] == fastest.name)
    assert verdict["what"] == "the fastest plan" and verdict["subject"] == "m_etf"
    assert best_placement(comparison).name not in ("pipeline_data", "data_parallel")
    assert comparison.instead[0] == "data_parallel"   # fastest first
    assert any(n.startswith("data_parallel (a plan") and "faster than every placement" in n for n in comparison.notes)
    assert any(line.startswith("use: data_parallel") for line in summary_lines(comparison))
