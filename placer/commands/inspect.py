"""`placer inspect`: a first look at a model — size, ops, FLOPs, critical path, bound inputs."""

from __future__ import annotations

import argparse
import json

from placer.commands.common import add_graph_args, model_settings

HELP = "summarise an ONNX model: nodes, ops, parameters, FLOPs, critical path"


def register(subparsers) -> None:
    """Add the `inspect` sub-command."""
    parser = subparsers.add_parser(
        "inspect", help=HELP,
        description="Load an ONNX model (binding dynamic dimensions with --input-shape), infer every "
                    "shape, and report its nodes, op histogram, parameters, FLOPs, activation bytes, "
                    "critical path and inputs. --json lists every node and the graph hash placements use.")
    add_graph_args(parser)
    parser.add_argument("--json", action="store_true",
                        help="print JSON with every node (name, op type, output shapes) and the graph hash")
    parser.add_argument("--profile", metavar="PROFILE.json",
                        help="a profile of this graph (placer measure --profile): also say what its profiling "
                             "inputs made each If, Loop and Scan do (the branch taken, the iterations run)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the summary (or its JSON form) of --graph (`placer.jobs.inspect`)."""
    from placer.graph.summary import format_summary, summarize, to_json
    from placer.jobs.inspect import InspectSettings, inspect

    result = inspect(InspectSettings(model_settings(args), args.profile))
    profiled = result.profiled_control_flow
    if args.json:
        print(json.dumps({**to_json(result.graph), **({"profiled_control_flow": profiled} if profiled is not None
                                                      else {})}, indent=1))
        return 0
    print(format_summary(summarize(result.graph)))
    if profiled is not None:
        print(f"control flow when profiled ({args.profile}):" if profiled else
              f"control flow when profiled ({args.profile}): none ran")
        for node, runs in profiled.items():
            print(f"  {node}: " + ", ".join(f"{what} ({n} run{'' if n == 1 else 's'})" for what, n in runs.items()))
    return 0
