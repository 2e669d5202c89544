"""`placer measure`: run a placement for real and print its step time, spread and peak memory."""

from __future__ import annotations

import argparse
import json

from placer.commands.common import (add_devices_arg, add_engine_arg, add_graph_args, add_objective_args,
                                    add_pipeline_args, add_placement_args, hardware_settings, model_settings,
                                    placement_settings, step_settings)

HELP = "measure the step time of a placement on the real devices"


def register(subparsers) -> None:
    """Add the `measure` sub-command."""
    parser = subparsers.add_parser(
        "measure", help=HELP,
        description="Run the model under a placement (--placement, --device, or the one `placer apply` "
                    "stored in the file; else everything on the CPU): warm-up runs, then timed runs. "
                    "Prints the median step time, its spread (interquartile range) and each device's "
                    "peak memory. --engine onnxruntime runs it in ONNX Runtime (and --profile times ORT's kernels). A failed placement (out of memory, timeout, kernel error) exits 1.")
    add_graph_args(parser)
    add_placement_args(parser)
    add_devices_arg(parser)
    add_objective_args(parser)
    add_engine_arg(parser)
    add_pipeline_args(parser)
    parser.add_argument("--warmup", type=int, default=2, metavar="N", help="untimed runs first (default 2)")
    parser.add_argument("--repeats", type=int, default=5, metavar="N", help="timed runs (default 5)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S",
                        help="limit of one step in seconds; slower is a failure (default 60)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    parser.add_argument("--profile", metavar="OUT.json",
                        help="also time every node on every device and the transfers between them, "
                             "and write that profile (the data of the profiled cost model) here; with "
                             "--objective training also each node's backward and each parameter's update. "
                             "It is of one micro-batch: the simulator prices any --micro-batches from it")
    parser.add_argument("--json", action="store_true", help="print the measurement as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Measure the placement (`placer.jobs.measure`) and print the figures; 0 when it ran, 1 when it failed."""
    from placer.engines.failures import format_bytes
    from placer.jobs.measure import MeasureSettings, measure

    result = measure(MeasureSettings(model_settings(args), placement_settings(args), hardware_settings(args),
                                     step_settings(args), args.warmup, args.repeats, args.timeout, args.seed,
                                     args.profile))
    m, protocol, placed = result.measurement, result.protocol, result.placed
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return 0 if m.ok else 1
    graph, placement, training, pipeline = placed.graph, placed.placement, placed.training, placed.pipeline
    counts = ", ".join(f"{d} ({n})" for d, n in placement.device_counts().items())
    print(f"graph        {graph.source}  (sha256 {graph.sha256[:12]})")
    what = f"{len(placement.nodes)} nodes" if hasattr(placement, "nodes") else \
        f"plan of {len(placement.ops)} ops ({sum(not op.whole for op in placement.ops.values())} split)"
    print(f"placement    {what} on {counts}" +
          ("  (onnxruntime engine)" if args.engine == "onnxruntime" else ""))
    if training is not None:
        print(f"objective    training step (loss {training.loss.kind}, "
              f"{', '.join(f'{k} {v}' for k, v in training.optimizer.to_dict().items())})")
    if m.ok:
        print(f"step time    {m.step_time * 1e3:.3f} ms  (IQR {m.spread * 1e3:.3f} ms; median of "
              f"{protocol.repeats} runs after {protocol.warmup} warm-up)")
        if pipeline.pipelined:
            order = f", {pipeline.schedule}" if training is not None else ""
            print(f"throughput   {result.throughput:.2f} micro-batches/s  ({pipeline.micro_batches} per step{order})")
    else:
        print(f"failed       {m.failure}: {m.reason}")
    if m.peak_memory:
        print("peak memory  " + ", ".join(f"{d} {format_bytes(b)}" for d, b in m.peak_memory.items()))
    if result.profile:
        print(f"profile      written to {result.profile}")
    return 0 if m.ok else 1
