"""The engine vs. onnxruntime on the CPU with the same intra-op threads, for the zoo CNNs,
timed side by side (interleaved) in one run. Also checks both compute the same outputs.

    python benchmarks/vs_onnxruntime.py [--quick] [--threads N] [--rounds R]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnxruntime as ort

from _bench import interleaved, machine_note, median, zoo_graph
from placer.measure.executor import PlacedExecutor
from placer.measure.measurer import random_feeds
from placer.placement import Placement

CNNS = ["inception_v3", "resnet50"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="resnet50 only, few rounds")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of both (default 1)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per model")
    args = parser.parse_args()
    models = ["resnet50"] if args.quick else CNNS
    rounds = args.rounds or (5 if args.quick else 15)
    print(f"placer vs onnxruntime {ort.__version__}, {args.threads} thread(s), {rounds} interleaved rounds; "
          f"{machine_note()}")
    print(f"{'model':14s} {'onnxruntime ms':>14s} {'placer ms':>10s} {'ratio':>6s} {'max |diff|':>10s}")
    for name in models:
        graph = zoo_graph(name)
        feeds = random_feeds(graph, seed=0)
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        session = ort.InferenceSession(graph.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        placement = Placement.single_device(list(graph.nodes), "cpu")
        with PlacedExecutor(graph, placement, [f"cpu[threads={args.threads}]"]) as executor:
            ours = executor.run(feeds)
            theirs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
            diff = max(float(np.abs(ours[k].numpy() - theirs[k]).max()) for k in theirs)
            times = interleaved({"ort": lambda: session.run(None, feeds), "placer": lambda: executor.run(feeds)},
                                rounds)
        o, p = median(times["ort"]), median(times["placer"])
        print(f"{name:14s} {o * 1e3:14.2f} {p * 1e3:10.2f} {p / o:6.3f} {diff:10.2e}")
        sys.stdout.flush()
    print("ratio = placer / onnxruntime (medians); onnxruntime also fuses and reorders the graph")
    return 0


if __name__ == "__main__":
    sys.exit(main())
