"""`placer apply`: write a placement into an ONNX model, and optionally split it per device."""

from __future__ import annotations

import argparse
import json

from placer.commands.common import (add_cluster_arg, add_graph_args, add_placement_args, check_writable,
                                    cluster_from_args, placement_on_cluster)


def register(subparsers) -> None:
    """Add `placer apply` to the CLI."""
    parser = subparsers.add_parser(
        "apply", help="write a placement into an ONNX model (and split it per device)",
        description="Annotate every node of the model with its device (node metadata placer.device, "
                    "the ONNX multi-device configuration, ONNX Runtime layer annotations). Without "
                    "--placement or --device, the placement already stored in the model is used.")
    add_graph_args(parser)
    add_placement_args(parser)
    add_cluster_arg(parser, "write a placement for described hardware (placer cluster list, or a TOML file): the "
                            "model lists the cluster's devices, and a node on a device it does not have is refused")
    parser.add_argument("-o", "--output", metavar="PLACED.onnx", help="where to write the annotated model")
    parser.add_argument("--split", metavar="DIR",
                        help="also write one ONNX model per device stage into DIR, chained by DIR/split.json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Resolve the placement against the graph, write the annotated model and/or the split."""
    from graphs import resolve
    from placer.annotate.read import read_placement
    from placer.annotate.resolve import parse_device_map, resolve_placement
    from placer.annotate.split import write_split
    from placer.annotate.write import ORT_SETTING, apply_placement, ort_layer_settings, save_model
    from placer.errors import PlacerError
    from placer.graph.load import parse_input_shapes, read_model
    from placer.kernels.loading import load_graph
    from placer.placement import Placement

    if not args.output and not args.split:
        raise PlacerError("say where to write: -o PLACED.onnx for the annotated model, --split DIR for "
                          "per-device models, or both")
    if args.output:
        check_writable(args.output, "-o")
    if args.split:
        check_writable(args.split, "--split", folder=True)
    cluster = cluster_from_args(args)
    path = resolve(args.graph)
    original = read_model(path)
    graph = load_graph(original, parse_input_shapes(args.input_shape), args.inputs)   # --inputs: the shapes they decide
    graph.source = str(path)
    if args.placement:
        placement = Placement.load(args.placement)
    elif args.device:
        placement = Placement.single_device(list(graph.nodes), args.device, graph.sha256)
    else:
        placement = read_placement(original)
        if placement is None:
            raise PlacerError(f"{path} holds no placement; give --placement P.json (from placer train) "
                              "or --device D")
    # The devices need not be on this machine: a placement for a GPU box can be written anywhere.
    placement = resolve_placement(graph, placement, parse_device_map(args.map), check_devices=False)
    if cluster is not None:
        placement = placement_on_cluster(cluster, placement)
    placed = apply_placement(original, placement, graph)

    counts = ", ".join(f"{d} {n}" for d, n in placement.device_counts().items())
    if args.output:
        save_model(placed, args.output)
        print(f"wrote {args.output}: {len(graph.nodes)} nodes placed ({counts})"
              + (f" for cluster {cluster.name} ({', '.join(cluster.device_names)})" if cluster else ""))
    if args.split:
        index = write_split(placed, placement, graph, args.split)
        stages = json.loads(index.read_text())["stages"]
        print(f"wrote {len(stages)} stage models to {args.split} "
              f"({', '.join(s['device'] for s in stages)}), chained by {index}")
    print(f"onnxruntime session option: {ORT_SETTING}={ort_layer_settings(placement)}")
    return 0
