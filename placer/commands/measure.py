"""`placer measure`: run a placement for real and print its step time, spread and peak memory."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from placer.commands.common import (add_devices_arg, add_engine_arg, add_graph_args, add_objective_args,
                                    add_pipeline_args, add_placement_args)


def register(subparsers) -> None:
    """Add the `measure` sub-command."""
    parser = subparsers.add_parser(
        "measure", help="measure the step time of a placement on the real devices",
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
    """Measure the placement named by the arguments; 0 when it ran, 1 when it failed."""
    from placer.commands.common import placed_model_from_args
    from placer.measure.measurer import MeasureProtocol
    from placer.kernels.prepare import prepare
    from placer.measure.measurer import measurer_for

    model = placed_model_from_args(args, {"--profile": args.profile})
    graph, placement, devices, training, pipeline = (model.graph, model.placement, model.devices,
                                                     model.training, model.pipeline)
    protocol = MeasureProtocol(warmup=args.warmup, repeats=args.repeats, timeout_s=args.timeout,
                               objective=args.objective)
    # the onnxruntime engine folds what placer's kernels can fold, and runs graphs they cannot bind
    prepared = prepare(graph) if args.engine == "torch" else None
    measurer = measurer_for(args.engine, graph, devices, protocol=protocol, seed=args.seed,
                            prepared=prepared, training=training, pipeline=pipeline)
    m = measurer.measure(placement)
    # a pipelined step pushes M micro-batches: what it is worth is micro-batches per second
    throughput = pipeline.micro_batches / m.step_time if m.ok and m.step_time else None
    if args.profile:
        profile_protocol = MeasureProtocol(warmup=1, repeats=max(1, args.repeats), timeout_s=args.timeout,
                                           objective=args.objective)
        from placer.costmodel.profiler import profile_graph

        profile = profile_graph(graph, devices, seed=args.seed, prepared=prepared,
                                protocol=profile_protocol, training=training, engine=args.engine)
        Path(args.profile).parent.mkdir(parents=True, exist_ok=True)   # check_writable found it can be made
        profile.save(args.profile)
    if args.json:
        print(json.dumps({"graph": {"source": graph.source, "sha256": graph.sha256},
                          "placement": placement.device_counts(), **m.to_dict(),
                          "micro_batches": pipeline.micro_batches, "throughput_per_s": throughput}, indent=1))
    else:
        counts = ", ".join(f"{d} ({n})" for d, n in placement.device_counts().items())
        print(f"graph        {graph.source}  (sha256 {graph.sha256[:12]})")
        print(f"placement    {len(placement.nodes)} nodes on {counts}" +
              ("  (onnxruntime engine)" if args.engine == "onnxruntime" else ""))
        if training is not None:
            print(f"objective    training step (loss {training.loss.kind}, "
                  f"{', '.join(f'{k} {v}' for k, v in training.optimizer.to_dict().items())})")
        if m.ok:
            print(f"step time    {m.step_time * 1e3:.3f} ms  (IQR {m.spread * 1e3:.3f} ms; median of "
                  f"{protocol.repeats} runs after {protocol.warmup} warm-up)")
            if pipeline.pipelined:
                order = f", {pipeline.schedule}" if training is not None else ""
                print(f"throughput   {throughput:.2f} micro-batches/s  ({pipeline.micro_batches} per step{order})")
        else:
            print(f"failed       {m.failure}: {m.reason}")
        if m.peak_memory:
            print("peak memory  " + ", ".join(f"{d} {_mib(b)}" for d, b in m.peak_memory.items()))
        if args.profile:
            print(f"profile      written to {args.profile}")
    return 0 if m.ok else 1


def _mib(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
