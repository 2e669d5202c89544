"""What a finished run says of its speedup over the best single device: the paired interval of the
side-by-side confirmation and its verdict, by the one rule (`placer.measure.intervals`)."""

from __future__ import annotations

from placer.measure.intervals import Interval
from placer.policy.run_summary import speedup_record, speedup_text


def _summary(judged: Interval | None, speedup: float = 1.3) -> dict:
    return {"speedup_vs_best_single_device": speedup, "best_single_device": "cpu:0",
            "vs_best_single_device": speedup_record(judged) if judged is not None else None}


def test_the_speedup_is_said_with_its_interval_and_verdict():
    faster = speedup_record(Interval(1.30, 1.28, 1.33, 20))
    assert faster["verdict"] == "faster" and faster["to_resolve"] is None and faster["speedup"]["n"] == 20
    assert speedup_text(_summary(Interval(1.30, 1.28, 1.33, 20))) == \
        "speedup over the best single device (cpu:0): 1.30x [1.28, 1.33], faster"
    unresolved = _summary(Interval(1.03, 1.01, 1.05, 30, blocks=3))
    assert unresolved["vs_best_single_device"]["verdict"] == "not resolved"
    assert unresolved["vs_best_single_device"]["to_resolve"]["blocks"] > 3
    assert "1.03x [1.01, 1.05], not resolved (" in speedup_text(unresolved)


def test_without_a_paired_figure_the_speedup_is_said_alone():
    # the best placement is a single device, or training's own figures (no confirmation)
    assert speedup_text(_summary(None)) == "speedup over the best single device (cpu:0): 1.30x"
    assert speedup_text(_summary(None, speedup=None)) is None


def test_a_run_keeps_its_best_placements_paired_speedup_and_verdict(tmp_path):
    from testgraphs import branches

    from placer.costmodel.simulator import SimulatedMeasurer
    from placer.graph.grouping import group_graph
    from placer.graph.load import load_graph
    from placer.policy.hparams import Hyperparameters
    from placer.policy.trainer import train

    devices = ["cpu:0", "cpu:1"]
    graph = load_graph(branches(4, 2))
    simulated = SimulatedMeasurer(graph, devices)   # exact figures: every difference stands
    hp = Hyperparameters(hidden_size=16, samples_per_update=4)
    result = train(graph, None, group_graph(graph, 4, 2), tmp_path, hp, samples=16, seed=0, reward="simulated",
                   simulator=simulated, confirm=simulated)
    s = result.summary
    assert not s["best_source"].startswith("single device")   # four branches on two devices: a split wins
    judged = s["vs_best_single_device"]
    assert judged["verdict"] == "faster" and judged["speedup"]["n"] == 1
    assert judged["speedup"]["value"] == s["speedup_vs_best_single_device"] > 1
