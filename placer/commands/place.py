"""`placer place`: place a model zero-shot with the pre-trained graph policy, in seconds."""

from __future__ import annotations

import argparse
import time

from placer.commands.common import add_cluster_arg, add_graph_args
from placer.errors import PlacerError

# Chains sampled from the policy beside its most likely ones: Inception-v3 on 4-10 devices is placed
# in about a second (sampling many and keeping the best is how neural combinatorial optimisation
# decodes, e.g. Kool et al. 2019); 256 found no more on the held-out problems
SAMPLED_CHAINS = 192
# Every chain is sampled and simulated in one batch held in memory (Inception-v3 on 10 devices: about
# 0.1 MB and 25 ms a chain on 2 cores), so --chains 10**9 ran out of memory after a minute; 16 times
# the 256 that found no more is past any use
MAX_CHAINS = 4096


def register(subparsers) -> None:
    """Add the `place` sub-command."""
    parser = subparsers.add_parser(
        "place", help="place a model zero-shot with the pre-trained graph policy (no training)",
        description="Place every op of the model on the cluster's devices with the graph policy shipped with placer "
                    "(or --policy FILE from placer pretrain): no training, no measurement. Prints the placement's "
                    "simulated step time beside the lower bound (as compare --cluster's) and the best list "
                    "heuristic's (m-ETF, m-SCT, HEFT, the expert, every single device) and writes the placement for placer apply, run or compare --include-placement.")
    add_graph_args(parser)
    add_cluster_arg(parser, "the hardware to place for: a catalogue cluster (placer cluster list) or a TOML file "
                            "(placer cluster describe-local writes this machine's); required")
    parser.add_argument("--out", required=True, metavar="PLACEMENT.json", help="where to write the placement")
    parser.add_argument("--policy", default=None, metavar="POLICY.pt",
                        help="a graph policy checkpoint (default: the pre-trained one shipped with placer)")
    parser.add_argument("--chains", type=int, default=SAMPLED_CHAINS, metavar="K",
                        help="chains of improvement rounds sampled from the policy beside its two most likely ones, "
                             "every round of each simulated, the fastest kept (default %(default)s; 0: the most "
                             "likely ones alone)")
    parser.add_argument("--seed", type=int, default=0, help="the sampled chains' seed (default 0)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from placer.commands.common import check_writable, cluster_from_args, load_graph_from_args
    from placer.costmodel.lower_bound import lower_bound
    from placer.measure.intervals import format_ratio
    from placer.policy.gnn.checkpoint import PRETRAINED, load_policy
    from placer.policy.gnn.episode import make_episode
    from placer.policy.gnn.placing import place_episode

    if not 0 <= args.chains <= MAX_CHAINS:
        raise PlacerError(f"--chains must be from 0 to {MAX_CHAINS}, not {args.chains}: every chain is simulated at "
                          "once, in time and memory that grow with them, and past 256 the held-out problems found "
                          "nothing faster")
    if not args.cluster:
        raise PlacerError("placer place needs --cluster: the policy places for described hardware (placer cluster "
                          "list; placer cluster describe-local describes this machine)")
    out = check_writable(args.out, "--out")
    cluster = cluster_from_args(args)
    policy, _ = load_policy(args.policy or PRETRAINED)
    graph = load_graph_from_args(args)
    started = time.monotonic()
    episode = make_episode(graph, cluster)   # the best list heuristic too: the policy improves on it as well
    placement = place_episode(policy, episode, seed=args.seed, chains=args.chains)
    placing_s = time.monotonic() - started
    info = placement.extra["placer"]
    found = episode.best_name is not None
    t = info["simulated_step_time"]
    # how far from the physical limit, on the same costs and caps as compare --cluster's ratio_to_lower_bound
    bound = lower_bound(graph, cluster.device_names, episode.cost, caps=episode.caps).value
    info.update(policy=str(args.policy or "pretrained"), cluster=cluster.name, seconds_to_place=round(placing_s, 3),
                best_heuristic=episode.best_name, best_heuristic_step_time=episode.best_time if found else None,
                lower_bound_step_time=bound, ratio_to_lower_bound=t / bound)
    out.parent.mkdir(parents=True, exist_ok=True)   # check_writable found it can be made
    placement.save(out)
    print(f"placed {graph.source} ({len(graph.nodes)} ops in {info['groups']} groups) on {cluster.name} "
          f"({len(cluster.devices)} devices) in {placing_s:.2f} s with the graph policy "
          f"({args.policy or 'pre-trained, shipped with placer'})")
    policy_t = info.get("policy_step_time", t)   # set where the heuristic's own placement was kept
    where = f"round {info['round']}" if "round" in info else "kept instead"
    print(f"  placement written        {t * 1e3:10.3f} ms simulated ({info['chain']}, {where}); "
          f"lower bound {bound * 1e3:.3f} ms ({format_ratio(t / bound)})")
    print(f"    the policy's best      {policy_t * 1e3:10.3f} ms simulated")
    if args.chains:
        print(f"    most likely chains     {info['first_chains_step_time'] * 1e3:10.3f} ms simulated "
              f"(without the {args.chains} sampled)")
    print(f"    from nothing alone     {info['from_nothing_step_time'] * 1e3:10.3f} ms simulated")
    if found:
        best = episode.best_time
        print(f"  best list heuristic      {best * 1e3:10.3f} ms simulated ({episode.best_name})")
        print(f"  policy / heuristic       {policy_t / best:10.3f}x" + ("  (faster)" if policy_t < best else ""))
    else:
        print("  no list heuristic fits the devices' memory")
    print(f"placement: {out}")
    return 0
