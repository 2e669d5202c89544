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
    parser.add_argument("--profile", metavar="PROFILE.json",
                        help="a profile of this graph (placer measure --profile): also say what its profiling "
                             "inputs made each If, Loop and Scan do (the branch taken, the iterations run)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the summary (or its JSON form) of --graph."""
    from placer.graph.summary import format_summary, summarize, to_json

    graph = load_graph_from_args(args)
    profiled = _profiled_control_flow(args.profile, graph) if args.profile else None
    if args.json:
        print(json.dumps({**to_json(graph), **({"profiled_control_flow": profiled} if profiled is not None else {})},
                         indent=1))
        return 0
    print(format_summary(summarize(graph)))
    if profiled is not None:
        print(f"control flow when profiled ({args.profile}):" if profiled else
              f"control flow when profiled ({args.profile}): none ran")
        for node, runs in profiled.items():
            print(f"  {node}: " + ", ".join(f"{what} ({n} run{'' if n == 1 else 's'})" for what, n in runs.items()))
    return 0


def _profiled_control_flow(path: str, graph) -> dict[str, dict[str, int]]:
    """What the profile at `path` records each control-flow node did, checked to be of `graph`."""
    from placer.errors import PlacerError
    from placer.costmodel.profile import Profile

    profile = Profile.load(path)
    if profile.graph_sha256 not in (None, graph.sha256):
        raise PlacerError(f"profile {path} is of another graph (sha256 {profile.graph_sha256[:12]}...); "
                          f"give a profile of {graph.source or 'this graph'} (placer measure --profile)")
    return profile.control_flow
