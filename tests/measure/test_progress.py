"""A long phase says when it starts and then, now and then, how far along it is."""

import onnx

from placer.measure.progress import Progress, rounds_progress, rounds_text
from placer.measure.rounds import RoundsProtocol, RoundsResult


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_start_line_always_and_then_a_line_at_most_every_ten_seconds():
    lines, clock = [], Clock()
    progress = Progress(lines.append, every_s=10.0, clock=clock)
    progress.start("starting")
    for t in range(0, 35):
        clock.now = float(t)
        progress(f"at {t} s")
    assert lines == ["starting", "at 10 s", "at 20 s", "at 30 s"]


def test_the_rounds_say_how_far_they_are_and_how_long_they_may_take():
    protocol = RoundsProtocol(min_rounds=10, max_rounds=40, max_seconds=180.0, blocks=3)
    assert rounds_text(protocol) == "3 blocks of 10-40 interleaved rounds, at most 180 s"
    assert rounds_text(RoundsProtocol(min_rounds=6, max_rounds=6, max_seconds=60.0)) == \
        "6-6 interleaved rounds, at most 60 s"
    lines = []
    result = RoundsResult({}, None, 12, None, 45.4, [], {}, protocol, blocks=[0] * 10 + [1] * 2)
    rounds_progress(Progress(lines.append, every_s=0.0), "side by side")(12, result)
    assert lines == ["side by side: round 12 (block 2 of 3), 45 s of at most 180 s"]


def test_profiling_says_how_far_along_each_class_of_devices_is(tmp_path):
    from testgraphs import branches

    from placer.costmodel.profiler import profile_graph
    from placer.graph.load import load_graph

    onnx.save(branches(2, 2), tmp_path / "b.onnx")
    lines = []
    profile_graph(load_graph(tmp_path / "b.onnx"), ["cpu:0[threads=1]", "cpu:1[threads=1]"],
                  progress=Progress(lines.append, every_s=0.0))
    assert lines[0] == "profiling cpu:0, cpu:1: round 1 of at most 15, 0 s"
    assert lines[-1].startswith(f"profiling cpu:0, cpu:1: round {len(lines)} of at most 15, ")
