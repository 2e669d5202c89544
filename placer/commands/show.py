"""`placer show`: what a placement puts on each device, and a picture of it."""

from __future__ import annotations

import argparse
import json

from placer.commands.common import (add_cluster_arg, add_graph_args, add_objective_args, add_placement_args,
                                    check_writable, cluster_from_args, placement_on_cluster)


def register(subparsers) -> None:
    """Add `placer show` to the CLI."""
    parser = subparsers.add_parser(
        "show", help="summarise and draw a placement (the one stored in the model, or --placement)",
        description="Per device: nodes, FLOPs, parameter bytes, bytes sent to and received from other "
                    "devices, and the peak memory the executor accounts for a step (with --objective "
                    "training: with gradients, saved activations and optimizer state); with -o, a picture "
                    "of the graph coloured by device. With --cluster, also the step time and peak memory "
                    "predicted on that hardware (simulated, nothing runs).")
    add_graph_args(parser)
    add_placement_args(parser)
    add_cluster_arg(parser, "also predict the placement's step time and peak memory on described hardware (placer "
                            "cluster list, or a TOML file), simulated with the roofline cost model from its datasheet "
                            "figures; the placement's devices must be the cluster's")
    add_objective_args(parser)
    parser.add_argument("-o", "--output", metavar="PICTURE.png", help="draw the placement into this image file")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the per-device summary (or JSON) and draw the picture with -o."""
    from placer.annotate.read import read_placement
    from placer.annotate.resolve import parse_device_map, resolve_placement
    from placer.annotate.summary import cross_device_bytes, summarize
    from placer.commands.common import load_graph_from_args, training_spec_from_args
    from placer.errors import PlacerError
    from placer.engines.torch.executor import accounted_memory
    from placer.placement import Placement

    if args.output:
        check_writable(args.output, "-o")
    cluster = cluster_from_args(args)
    graph = load_graph_from_args(args)
    if args.placement:
        placement, origin = Placement.load(args.placement), args.placement
    elif args.device:
        placement, origin = Placement.single_device(list(graph.nodes), args.device, graph.sha256), "--device"
    else:
        placement, origin = read_placement(graph.model), "stored in the model"
        if placement is None:
            raise PlacerError(f"{args.graph} holds no placement; write one with placer apply, "
                              "or give --placement P.json")
    placement = resolve_placement(graph, placement, parse_device_map(args.map), check_devices=False)
    if cluster is not None:
        placement = placement_on_cluster(cluster, placement)
    rows = summarize(graph, placement)
    crossing = cross_device_bytes(graph, placement)
    training = training_spec_from_args(args, graph)
    memory = {d: m.peak for d, m in accounted_memory(graph, placement, training=training).items()}
    predicted = _predict(graph, placement, cluster, training) if cluster is not None else None
    picture = None
    if args.output:
        from placer.annotate.draw import draw_placement

        picture = draw_placement(graph, placement, args.output)

    if args.json:
        print(json.dumps({"graph": args.graph, "sha256": graph.sha256, "placement": origin,
                          "devices": [{**r.to_dict(), "peak_memory": memory.get(r.device, 0)} for r in rows],
                          "objective": args.objective, "bytes_crossing": crossing,
                          "picture": str(picture) if picture else None,
                          **(_predicted_json(cluster, predicted) if predicted is not None else {})}, indent=2))
        return 0
    print(f"{args.graph}: {len(graph.nodes)} nodes on {len(placement.devices)} devices (placement {origin})")
    header = (f"{'device':<10} {'nodes':>6} {'FLOPs':>9} {'params':>10} {'sent':>10} {'received':>10} "
              f"{'peak memory':>12}")
    print(header)
    for r in rows:
        print(f"{r.device:<10} {r.nodes:>6} {_count(r.flops):>9} {_size(r.param_bytes):>10} "
              f"{_size(r.bytes_sent):>10} {_size(r.bytes_received):>10} {_size(memory.get(r.device, 0)):>12}")
    if training is not None:
        print(f"peak memory of a training step (loss {training.loss.kind}, {training.optimizer.name}): "
              "gradients, saved activations and optimizer state included")
    print(f"bytes crossing devices per step: {_size(crossing)}")
    if predicted is not None:
        _print_predicted(cluster, predicted, training)
    if picture:
        print(f"wrote {picture}")
    return 0


def _predict(graph, placement, cluster, training):
    """The placement's step on `cluster`, simulated with the roofline cost model (memory capacities
    as caps): a `Measurement` whose figures are predictions."""
    from placer.costmodel.roofline import cluster_measurer

    return cluster_measurer(cluster, graph, training=training).measure(placement)


def _predicted_json(cluster, m) -> dict:
    return {"simulated": True, "cluster": cluster.name,
            "predicted": {"step_time_s": m.step_time if m.ok else None, "failure": m.failure, "reason": m.reason,
                          "peak_memory": m.peak_memory,
                          "memory_capacity": {d.name: d.model.memory_bytes for d in cluster.devices}}}


def _print_predicted(cluster, m, training) -> None:
    step = "training step" if training is not None else "step"
    print(f"predicted on cluster {cluster.name} (simulated with the roofline cost model from its datasheet figures; "
          "nothing was run or measured):")
    print(f"  {step} time {m.step_time * 1e3:.3f} ms" if m.ok else f"  the {step} fails: {m.failure}: {m.reason}")
    print("  peak memory / capacity: " + ", ".join(
        f"{d.name} {_size(m.peak_memory.get(d.name, 0))} / {_size(d.model.memory_bytes)}" for d in cluster.devices))


def _count(n: float) -> str:
    for unit in ("", "k", "M", "G", "T"):
        if abs(n) < 1000 or unit == "T":
            return f"{n:.0f}" if unit == "" else f"{n:.2f}{unit}"
        n /= 1000
    return f"{n:.2f}T"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
