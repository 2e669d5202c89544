"""`placer show`: what a placement puts on each device, and a picture of it."""

from __future__ import annotations

import argparse
import json

from placer.commands.common import (add_cluster_arg, add_graph_args, add_objective_args, add_placement_args,
                                    model_settings, placement_settings, step_settings)

HELP = "summarise and draw a placement (the one stored in the model, or --placement)"


def register(subparsers) -> None:
    """Add `placer show` to the CLI."""
    parser = subparsers.add_parser(
        "show", help=HELP,
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
    """Print the per-device summary (or JSON) of the placement (`placer.jobs.show`)."""
    from placer.jobs.show import ShowSettings, show

    r = show(ShowSettings(model_settings(args), placement_settings(args), args.cluster, step_settings(args),
                          args.output))
    if args.json:
        print(json.dumps(r.to_dict(), indent=2))
        return 0
    what = "plan" if r.plan is not None else "placement"
    print(f"{args.graph}: {len(r.graph.nodes)} nodes on {len(r.placement.devices)} devices "
          f"({what} {r.settings.placement.origin})")
    print(f"{'device':<10} {'nodes':>6} {'FLOPs':>9} {'params':>10} {'sent':>10} {'received':>10} "
          f"{'peak memory':>12}")
    for row in r.rows:
        print(f"{row.device:<10} {row.nodes:>6} {_count(row.flops):>9} {_size(row.param_bytes):>10} "
              f"{_size(row.bytes_sent):>10} {_size(row.bytes_received):>10} "
              f"{_size(r.memory.get(row.device, 0)) if r.plan is None else '-':>12}")
    if r.training is not None:
        print(f"peak memory of a training step (loss {r.training.loss.kind}, {r.training.optimizer.name}): "
              "gradients, saved activations and optimizer state included")
    print(f"bytes crossing devices per step: {_size(r.crossing)}")
    if r.summary is not None:
        print("\n".join(r.summary.lines()))
    if r.predicted is not None:
        _print_predicted(r.cluster, r.predicted, r.training)
    if r.picture:
        print(f"wrote {r.picture}")
    return 0


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
