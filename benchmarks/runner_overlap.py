"""Does the deployable runner (`placer.engines.onnxruntime.load`) overlap independent work? A two-branch graph
(x -> two chains of MatMul+Relu -> Concat), split with one branch per device (`placer apply
--split`), run by the runner on two 1-thread devices, against ONNX Runtime on the whole model in
one plain session on one thread (one of the devices) and on two (the whole machine, its idle pool
threads not spinning), measured in interleaved rounds. The target: at least 1.6x the single device.

    python benchmarks/runner_overlap.py [--depth 6] [--width 1024] [--batch 256] [--max-rounds 20]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _bench import SessionRun, machine_note  # noqa: E402
from testgraphs import branches  # noqa: E402

import placer.engines.onnxruntime  # noqa: E402
from placer.annotate.split import write_split  # noqa: E402
from placer.graph.feeds import random_feeds  # noqa: E402
from placer.measure.intervals import speedup_words  # noqa: E402
from placer.kernels.loading import load_graph  # noqa: E402
from placer.measure.rounds import Candidate, RoundsProtocol, measure_in_rounds  # noqa: E402
from placer.placement import Placement  # noqa: E402

TARGET = 1.6
DEVICES = ["cpu:0[threads=1]", "cpu:1[threads=1]"]


class RunnerRun:
    """The split model in the runner, as a `PlacementRun` (one step per call)."""

    def __init__(self, folder: Path, feeds: dict) -> None:
        self.runner = placer.engines.onnxruntime.load(folder, devices=DEVICES)
        self.feeds = feeds
        self.peak_memory: dict[str, int] = {}

    def step(self) -> float:
        start = time.perf_counter()
        self.runner.run(self.feeds)
        return time.perf_counter() - start

    def close(self) -> None:
        self.runner.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=6, help="MatMul+Relu layers per branch")
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--max-rounds", type=int, default=20)
    args = parser.parse_args()
    model = branches(2, depth=args.depth, width=args.width, batch=args.batch)
    graph = load_graph(model)
    # one branch per device, the join on cpu:0
    placement = Placement(["cpu:0", "cpu:1"], {n: "cpu:1" if n.startswith(("mm1", "relu1")) else "cpu:0"
                                               for n in graph.nodes}, graph.sha256)
    feeds = random_feeds(graph, seed=0)
    model_bytes = model.SerializeToString()
    with tempfile.TemporaryDirectory() as folder:
        write_split(model, placement, graph, Path(folder))
        candidates = [Candidate("one device", lambda: SessionRun(model_bytes, 1, feeds)),
                      Candidate("runner, 2 devices", lambda: RunnerRun(Path(folder), feeds)),
                      # its pool must not spin between steps: a spinning pool holds a core into the
                      # next candidate's step (the runner's median went from 37 to 60 ms with it)
                      Candidate("whole machine", lambda: SessionRun(model_bytes, 2, feeds, spinning=False))]
        result = measure_in_rounds(candidates, RoundsProtocol(max_rounds=args.max_rounds), reference="one device")
    print(f"two branches of {args.depth} MatMul({args.batch}x{args.width})+Relu; {machine_note()}; "
          f"{result.rounds} interleaved rounds")
    for name in ("one device", "runner, 2 devices", "whole machine"):
        m = result.measurements[name]
        i = result.interval(name)
        vs = "" if name == "one device" else f"  vs one device: {speedup_words(result.ratio(name, 'one device'))}"
        print(f"  {name:18s} {m.step_time * 1e3:8.2f} ms [{i.low * 1e3:.2f}, {i.high * 1e3:.2f}]{vs}")
    if result.cap_note():
        print(f"  {result.cap_note()}")
    speedup = 1 / result.ratio("runner, 2 devices", "one device").value
    print(f"target: the runner at least {TARGET}x one device: {'met' if speedup >= TARGET else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
