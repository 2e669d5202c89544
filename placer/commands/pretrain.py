"""`placer pretrain`: train the graph policy across the corpus on the simulator."""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from placer.commands.common import check_writable

HELP = "pre-train the graph policy across the corpus of graphs and clusters (simulated)"


def register(subparsers) -> None:
    """Add the `pretrain` sub-command."""
    parser = subparsers.add_parser(
        "pretrain", help=HELP,
        description="Train the graph policy (placer/policy/gnn) with REINFORCE across the corpus's training items "
                    "(placer/corpus: zoo families, random DAGs, catalogue and sampled clusters; the held-out families "
                    "and clusters never), every reward simulated with the clusters' roofline costs. The run folder "
                    "gets TensorBoard curves, checkpoint.pt (for --resume), policy.pt (for placer place --policy, "
                    "or to ship) and summary.json with each held-out item placed zero-shot against the best list "
                    "heuristic.")
    parser.add_argument("--run-dir", default=None, metavar="DIR",
                        help="run folder (default runs/pretrain-<date>-<time>)")
    parser.add_argument("--budget", default=None, metavar="TIME", help="training time, like 90s, 10m or 1h")
    parser.add_argument("--updates", type=int, default=None, metavar="N",
                        help="stop after N updates in all (a resumed run continues to N)")
    parser.add_argument("--corpus", choices=("small", "full"), default="full",
                        help="the corpus's size: small (a few graphs, seconds to build; for trying) or full (default)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the corpus, the policy and the sampling (default 0)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its checkpoint")
    parser.add_argument("--items-per-update", type=int, default=8, metavar="N",
                        help="training items per update (default %(default)s)")
    parser.add_argument("--samples", type=int, default=16, metavar="K",
                        help="placements sampled per item per update (default %(default)s)")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate (default %(default)s)")
    parser.add_argument("--hidden", type=int, default=64, help="embedding width (default %(default)s)")
    parser.add_argument("--layers", type=int, default=3, help="message-passing layers (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of improvement per placement (default %(default)s)")
    parser.add_argument("--start-from", default=None, metavar="POLICY", help="continue this graph policy's "
                        "training ('pretrained': the shipped one), its shape taken, on a corpus that has grown")
    parser.add_argument("--workers", type=int, default=0, metavar="N",
                        help="roll out on N Ray tasks at once (pip install -e '.[ray]'); default 0: in this process")
    parser.add_argument("--ray-address", default=None, metavar="HOST:PORT",
                        help="with --workers: join this Ray cluster (default: start a local one)")
    parser.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace):
    """The `PretrainSettings` of the command line."""
    from placer.commands.train import parse_budget
    from placer.jobs.pretrain import PretrainSettings, start_policy
    from placer.policy.gnn.learn import LearnConfig
    from placer.policy.gnn.model import PolicyConfig
    from placer.policy.gnn.pretrain import PretrainConfig

    heads = 2 if args.hidden % 2 == 0 else 1
    policy = PolicyConfig(hidden=args.hidden, layers=args.layers, heads=heads, rounds=args.rounds)
    start_from, policy = start_policy(args.start_from, policy)
    config = PretrainConfig(items_per_update=args.items_per_update, seed=args.seed, policy=policy,
                            learn=LearnConfig(samples=args.samples, lr=args.lr))
    # the command line, recorded beside the policy (not when called from Python)
    command = "placer " + shlex.join(sys.argv[1:]) if Path(sys.argv[0]).name in ("placer", "cli.py") else None
    return PretrainSettings(config, parse_budget(args.budget) if args.budget else None, args.updates, args.corpus,
                            None if args.run_dir is None else Path(args.run_dir), args.resume, args.workers,
                            args.ray_address, command, start_from)


def run(args: argparse.Namespace) -> int:
    """Pre-train (`placer.jobs.pretrain`); print the held-out items' figures."""
    from placer.jobs.pretrain import held_out_lines, pretrain, run_folder

    settings = settings_from_args(args)
    # fixed here, checked before any work: the default folder is named by the time
    settings = replace(settings, run_dir=check_writable(run_folder(settings), "--run-dir", folder=True))
    pretrained = pretrain(settings)
    result, run_dir = pretrained.result, pretrained.run_dir
    print(f"{result.updates} updates, {result.samples} sampled placements in {result.seconds:.0f} s")
    print("\n".join(held_out_lines(result)))
    print(f"policy: {run_dir / 'policy.pt'}   curves: tensorboard --logdir {run_dir}")
    return 0
