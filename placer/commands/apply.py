"""`placer apply`: write a placement into an ONNX model, and optionally split it per device."""

from __future__ import annotations

import argparse

from placer.commands.common import (add_cluster_arg, add_graph_args, add_placement_args, model_settings,
                                    placement_settings)

HELP = "write a placement into an ONNX model (and split it per device)"


def register(subparsers) -> None:
    """Add `placer apply` to the CLI."""
    parser = subparsers.add_parser(
        "apply", help=HELP,
        description="Annotate every node of the model with its device (node metadata placer.device, "
                    "the ONNX multi-device configuration, ONNX Runtime layer annotations). Without "
                    "--placement or --device, the placement already stored in the model is used. A plan "
                    "file (placer.plan/1) given as --placement is written as IR-11 sharding specs: each "
                    "split op's tensors over its devices (a Partial() also in node metadata placer.layout).")
    add_graph_args(parser)
    add_placement_args(parser)
    add_cluster_arg(parser, "write a placement for described hardware (placer cluster list, or a TOML file): the "
                            "model lists the cluster's devices, and a node on a device it does not have is refused")
    parser.add_argument("-o", "--output", metavar="PLACED.onnx", help="where to write the annotated model")
    parser.add_argument("--split", metavar="DIR",
                        help="also write one ONNX model per device stage into DIR, chained by DIR/split.json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the annotated model and/or the split (`placer.jobs.apply`); say what was written."""
    from placer.devices import device_kind
    from placer.jobs.apply import ApplySettings, apply

    result = apply(ApplySettings(model_settings(args), placement_settings(args), args.cluster, args.output,
                                 args.split))
    cluster = result.cluster
    if result.plan is not None:
        print(result.plan_line(args.output))
        return 0
    if args.output:
        counts = result.device_counts()
        print(f"wrote {args.output}: {sum(counts.values())} nodes placed "
              f"({', '.join(f'{d} {n}' for d, n in counts.items())})"
              + (f" for cluster {cluster.name} ({', '.join(cluster.device_names)})" if cluster else ""))
    if args.split:
        print(f"wrote {len(result.split_devices)} stage models to {args.split} "
              f"({', '.join(result.split_devices)}), chained by {result.split_index}")
    if args.output and len({device_kind(d) for d in result.placement.nodes.values()}) > 1:
        # ONNX Runtime picks each node's provider itself unless this option maps the annotations to providers;
        # on one kind of device (CPUs alone) there is nothing to map, so nothing is printed
        from placer.annotate.write import ORT_SETTING

        print(f"to run {args.output} in ONNX Runtime with each node on its device's provider, set the session option "
              f'options.add_session_config_entry("{ORT_SETTING}", "{result.ort_layer_settings}")')
    return 0
