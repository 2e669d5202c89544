"""`placer place`: place a model zero-shot with the pre-trained graph policy, in seconds."""

from __future__ import annotations

import argparse

from placer.commands.common import add_cluster_arg, add_graph_args
from placer.jobs.place import SAMPLED_CHAINS

HELP = "place a model zero-shot with the pre-trained graph policy (no training)"


def register(subparsers) -> None:
    """Add the `place` sub-command."""
    parser = subparsers.add_parser(
        "place", help=HELP,
        description="Place every op of the model on the cluster's devices with the graph policy shipped with placer "
                    "(or --policy FILE from placer pretrain): no training, no measurement. Prints the placement's "
                    "simulated step time beside the lower bound (as compare --cluster's) and the best list "
                    "heuristic's (m-ETF, m-SCT, HEFT, the expert, every single device) and writes the placement for placer apply, run or compare --include-placement.")
    add_graph_args(parser)
    add_cluster_arg(parser, "the hardware to place for: a catalogue cluster (placer cluster list) or a TOML file "
                            "(placer cluster describe-local writes this machine's); required")
    parser.add_argument("-o", "--out", required=True, metavar="PLACEMENT.json", help="where to write the placement")
    parser.add_argument("--policy", default=None, metavar="POLICY.pt",
                        help="a graph policy checkpoint (default: the pre-trained one shipped with placer)")
    parser.add_argument("--chains", type=int, default=SAMPLED_CHAINS, metavar="K",
                        help="chains of improvement rounds sampled from the policy beside its two most likely ones, "
                             "every round of each simulated, the fastest kept (default %(default)s; 0: the most "
                             "likely ones alone)")
    parser.add_argument("--seed", type=int, default=0, help="the sampled chains' seed (default 0)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Place with the policy (`placer.jobs.place`); print the placement's figures beside the policy's own,
    the lower bound and the best list heuristic's."""
    from placer.commands.common import check_writable, model_settings
    from placer.jobs.place import PlaceSettings, place
    from placer.measure.intervals import format_ratio

    settings = PlaceSettings(model_settings(args), args.cluster, args.out, args.policy, args.chains, args.seed)
    check_writable(settings.out, "--out")
    result = place(settings)
    info = result.placement.extra["placer"]
    t, bound = info["simulated_step_time"], info["lower_bound_step_time"]
    print(f"placed {result.graph.source} ({len(result.graph.nodes)} ops in {info['groups']} groups) on "
          f"{result.cluster.name} ({len(result.cluster.devices)} devices) in {result.seconds:.2f} s with the graph "
          f"policy ({settings.policy or 'pre-trained, shipped with placer'})")
    policy_t = info.get("policy_step_time", t)   # set where the heuristic's own placement was kept
    # None: no placement of that kind fits the devices' memory
    _simulated = lambda s: "  overflows a device's memory" if s is None else f"{s * 1e3:10.3f} ms simulated"  # noqa: E731
    where = f"round {info['round']}" if "round" in info else "kept instead"
    print(f"  placement written        {_simulated(t)} ({info['chain']}, {where}); "
          f"lower bound {bound * 1e3:.3f} ms ({format_ratio(t / bound)})")
    print(f"    the policy's best      {_simulated(policy_t)}")
    if settings.chains:
        print(f"    most likely chains     {_simulated(info['first_chains_step_time'])} "
              f"(without the {settings.chains} sampled)")
    print(f"    from nothing alone     {_simulated(info['from_nothing_step_time'])}")
    if info["best_heuristic"] is not None:
        best = info["best_heuristic_step_time"]
        print(f"  best list heuristic      {_simulated(best)} ({info['best_heuristic']})")
        if policy_t is not None:
            print(f"  policy / heuristic       {policy_t / best:10.3f}x" + ("  (faster)" if policy_t < best else ""))
    else:
        print("  no list heuristic fits the devices' memory")
    print(f"placement: {result.path}")
    return 0
