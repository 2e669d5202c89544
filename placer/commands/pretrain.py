"""`placer pretrain`: train the graph policy across the corpus on the simulator."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from placer.errors import PlacerError


def register(subparsers) -> None:
    """Add the `pretrain` sub-command."""
    parser = subparsers.add_parser(
        "pretrain", help="pre-train the graph policy across the corpus of graphs and clusters (simulated)",
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
    parser.add_argument("--workers", type=int, default=0, metavar="N",
                        help="roll out on N Ray tasks at once (pip install -e '.[ray]'); default 0: in this process")
    parser.add_argument("--ray-address", default=None, metavar="HOST:PORT",
                        help="with --workers: join this Ray cluster (default: start a local one)")
    parser.set_defaults(func=run)


def _run_dir(args: argparse.Namespace) -> Path:
    from placer.commands.common import check_writable
    from placer.policy.gnn.pretrain import CHECKPOINT

    if args.run_dir is None:
        if args.resume:
            raise PlacerError("--resume needs the --run-dir of the run to continue")
        return check_writable(Path("runs") / f"pretrain-{time.strftime('%Y%m%d-%H%M%S')}", "--run-dir", folder=True)
    run_dir = Path(args.run_dir)
    if not args.resume and (run_dir / CHECKPOINT).exists():
        raise PlacerError(f"{run_dir} already holds a run; add --resume to continue it or pick another --run-dir")
    if args.resume and not (run_dir / CHECKPOINT).exists():
        raise PlacerError(f"{run_dir} holds no {CHECKPOINT} to resume; drop --resume to start a run there")
    return check_writable(run_dir, "--run-dir", folder=True)


def run(args: argparse.Namespace) -> int:
    from placer.commands.train import parse_budget
    from placer.policy.gnn.learn import LearnConfig
    from placer.policy.gnn.model import PolicyConfig
    from placer.policy.gnn.pretrain import PretrainConfig
    from placer.policy.run_lock import hold_run_folder

    for name in ("items_per_update", "samples", "hidden", "layers", "rounds"):
        if getattr(args, name) < 1:
            raise PlacerError(f"--{name.replace('_', '-')} must be at least 1")
    if args.workers < 0:
        raise PlacerError("--workers must be 0 (in this process) or more")
    if args.updates is not None and args.updates < 1:
        raise PlacerError("--updates must be at least 1")
    budget_s = parse_budget(args.budget) if args.budget else None
    if budget_s is None and args.updates is None:
        raise PlacerError("give a --budget (like 10m) or --updates N")
    heads = 2 if args.hidden % 2 == 0 else 1
    policy = PolicyConfig(hidden=args.hidden, layers=args.layers, heads=heads, rounds=args.rounds)
    config = PretrainConfig(items_per_update=args.items_per_update, seed=args.seed, policy=policy,
                            learn=LearnConfig(samples=args.samples, lr=args.lr))
    run_dir = _run_dir(args)
    with hold_run_folder(run_dir, "placer pretrain"):
        return _pretrain(args, run_dir, config, budget_s)


def _pretrain(args: argparse.Namespace, run_dir: Path, config, budget_s: float | None) -> int:
    """The pre-training job in the locked `run_dir`, and its figures."""
    from placer.corpus import held_out_items, training_items
    from placer.policy.gnn.pretrain import pretrain

    started = time.monotonic()
    items = list(training_items(args.seed, args.corpus))
    held_out = held_out_items(args.seed, args.corpus)
    print(f"corpus ({args.corpus}): {len(items)} training items, {len(held_out)} held out, built in "
          f"{time.monotonic() - started:.0f} s; run folder {run_dir}")
    rollouts = None
    if args.workers:
        from placer.policy.gnn.rollouts import RayRollouts

        rollouts = RayRollouts(args.workers, args.ray_address)
    # the command line, recorded beside the policy (not when called from Python)
    command = "placer " + shlex.join(sys.argv[1:]) if Path(sys.argv[0]).name in ("placer", "cli.py") else None
    result = pretrain(run_dir, items, held_out, config, budget_s=budget_s, updates=args.updates, resume=args.resume,
                      rollouts=rollouts, run_info={"corpus": args.corpus, "command": command})
    print(f"{result.updates} updates, {result.samples} sampled placements in {result.seconds:.0f} s")
    print("held out, placed zero-shot: simulated step time over the best list heuristic's, over the best baseline's "
          "(local search included), and from nothing alone over the heuristic's")
    for row in result.held_out:
        if row["ratio_to_best_heuristic"] is None:
            print(f"  {row['name']:<58} no heuristic fits")
            continue
        print(f"  {row['name']:<58} {row['ratio_to_best_heuristic']:6.3f}x {row['ratio_to_best_baseline']:6.3f}x "
              f"{row['from_nothing_ratio_to_best_heuristic']:6.3f}x  ({row['seconds_to_place']:.2f} s)")
    s = result.summary
    if s["held_out_mean_ratio"] is not None:
        print(f"mean {s['held_out_mean_ratio']:.3f}x / {s['held_out_mean_ratio_to_best_baseline']:.3f}x / "
              f"{s['held_out_from_nothing_mean_ratio']:.3f}x, worst {s['held_out_worst_ratio']:.3f}x / "
              f"{s['held_out_worst_ratio_to_best_baseline']:.3f}x / {s['held_out_from_nothing_worst_ratio']:.3f}x")
    print(f"policy: {run_dir / 'policy.pt'}   curves: tensorboard --logdir {run_dir}")
    return 0
