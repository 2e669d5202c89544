"""Executor overhead: every node on one device vs. the zoo's torch model run eagerly, same weights
and same intra-op threads, timed side by side (interleaved) in one run. Target: at most 1.10x.

    python benchmarks/executor_overhead.py [--quick] [--threads N] [--rounds R] [--models a,b]
"""

from __future__ import annotations

import argparse
import sys

import torch

from _bench import ThreadRunner, eager_row, machine_note, zoo_model_and_inputs
from placer.engines.torch.executor import PlacedExecutor
from placer.placement import Placement

# (name, options): options shared by the export and the eager model so the weights are the same
MODELS = {"inception_v3": {}, "resnet50": {}, "rnnlm": {}, "nmt": {},
          "transformer": {"layers": 2, "seq_len": 64, "vocab": 8000}}
QUICK = {"resnet50": {}, "rnnlm": {"batch": 8, "seq_len": 10, "vocab": 1000}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two models, few rounds")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of both (default 1)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per model (at least 6)")
    parser.add_argument("--models", default=None, help="comma-separated zoo names")
    args = parser.parse_args()
    models = QUICK if args.quick else MODELS
    if args.models:
        models = {m: MODELS.get(m, {}) for m in args.models.split(",")}
    rounds = args.rounds or (6 if args.quick else 15)   # 6: the fewest a 95% interval needs
    print(f"executor overhead, {args.threads} thread(s), {rounds} interleaved rounds; {machine_note()}")
    print(f"{'model':14s} {'nodes':>5s} {'eager ms':>9s} {'executor ms':>11s} {'ratio':>6s}")
    runner = ThreadRunner(args.threads)
    ratios = []
    for name, opts in models.items():
        # the eager model gets the same input values (same order as the graph's inputs)
        graph, module, feeds, eager_inputs = zoo_model_and_inputs(name, **opts)
        device = f"cpu[threads={args.threads}]"
        placement = Placement.single_device(list(graph.nodes), "cpu")
        with PlacedExecutor(graph, placement, [device]) as executor:
            def eager() -> None:
                with torch.inference_mode():
                    module(*eager_inputs)

            ratios.append(eager_row(name, len(graph.nodes), runner, eager, lambda: executor.run(feeds), rounds))
    runner.close()
    worst = max(ratios, key=lambda r: r.value)
    print(f"worst ratio {worst.format_ratio()} (target <= 1.10); ratio = executor / eager, "
          f"the median of the per-round ratios with its 95% interval")
    return 0


if __name__ == "__main__":
    sys.exit(main())
