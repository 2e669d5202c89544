"""`placer inspect`: a first look at a model — size, ops, FLOPs, critical path, bound inputs."""

from __future__ import annotations

import argparse
import json

from placer.commands.common import add_graph_args, load_graph_from_args


def register(subparsers) -> None:
    """Add the `inspect` sub-command."""
    parser = subparsers.add_parser(
        "inspect", help="summarise an ONNX model: nodes, ops, parameters, FLOPs, critical path",
        description="Load an ONNX model (binding dynamic dimensions with --input-shape), infer every "
                    "shape, and report its nodes, op histogram, parameters, FLOPs, activation bytes, "
                    "critical path and inputs. --json lists every node and the graph hash placements use.")
    add_graph_args(parser)
    parser.add_argument("--json", action="store_true",
                        help="print JSON with every node (name, op type, output shapes) and the graph hash")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the summary (or its JSON form) of --graph."""
    from placer.graph.summary import format_summary, summarize, to_json

    graph = load_graph_from_args(args)
    if args.json:
        print(json.dumps(to_json(graph), indent=1))
    else:
        print(format_summary(summarize(graph)))
    return 0
