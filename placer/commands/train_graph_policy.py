"""`placer train --policy pretrained|POLICY.pt`: fine-tune the graph policy on one graph and cluster."""

from __future__ import annotations

import argparse
from pathlib import Path

from placer.errors import PlacerError


def policy_path(value: str) -> Path:
    """The checkpoint --policy names: the shipped one for `pretrained`, else a policy.pt file."""
    from placer.policy.gnn.checkpoint import PRETRAINED

    if value == "pretrained":
        return PRETRAINED
    if not value.endswith(".pt"):
        raise PlacerError(f"--policy takes seq2seq, pretrained or a graph policy file (policy.pt), not {value!r}")
    return Path(value)


def finetune_from_args(args: argparse.Namespace, run_dir: Path, budget_s: float | None) -> int:
    """Fine-tune the --policy checkpoint on --graph and --cluster with simulated rewards, for
    --samples or `budget_s` seconds; print the figures."""
    from placer.commands.common import cluster_from_args, load_graph_from_args
    from placer.policy.gnn.checkpoint import load_policy
    from placer.policy.gnn.episode import make_episode
    from placer.policy.gnn.finetune import finetune
    from placer.policy.gnn.learn import LearnConfig

    path = policy_path(args.policy)
    if not args.cluster:
        raise PlacerError("the graph policy learns on a described cluster's simulated rewards: add --cluster NAME|FILE "
                          "(placer cluster describe-local describes this machine), or use --policy seq2seq")
    if args.reward == "real" or args.workers or args.objective != "inference" or args.micro_batches != 1:
        raise PlacerError("--policy pretrained fine-tunes on simulated inference steps of the cluster; drop --reward "
                          "real, --workers, --objective training and --micro-batches, or use --policy seq2seq")
    if args.resume:
        raise PlacerError("--resume continues seq2seq runs only; fine-tune again from the run's policy.pt with "
                          "--policy RUN/policy.pt")
    policy, info = load_policy(path)
    graph = load_graph_from_args(args)
    cluster = cluster_from_args(args)
    episode = make_episode(graph, cluster, name=f"{graph.source}@{cluster.name}")
    print(f"fine-tuning the graph policy ({args.policy}) on {graph.source} ({len(graph.nodes)} ops in "
          f"{episode.features.n_groups} groups) on {cluster.name}, rewards simulated; run folder {run_dir}")
    result = finetune(policy, episode, run_dir, LearnConfig(), samples=args.samples, budget_s=budget_s, seed=args.seed,
                      run_info={"graph": graph.source, "cluster": cluster.name, "policy": str(path), "simulated": True,
                                "pretrained_info": {k: info[k] for k in ("corpus", "command") if k in info}},
                      log=print)
    s = result.summary
    print(f"  zero-shot placement      {s['zero_shot_step_time'] * 1e3:10.3f} ms simulated")
    print(f"  fine-tuned (greedy)      {s['greedy_step_time'] * 1e3:10.3f} ms simulated")
    print(f"  best placement found     {s['best_step_time'] * 1e3:10.3f} ms simulated ({s['best_source']}, "
          f"{s['samples']} samples, {s['seconds']:.0f} s)")
    if s["best_heuristic_step_time"]:
        print(f"  best list heuristic      {s['best_heuristic_step_time'] * 1e3:10.3f} ms simulated "
              f"({s['best_heuristic']}): the placement is {s['best_heuristic_step_time'] / s['best_step_time']:.3f}x "
              "as fast")
    print(f"placement: {run_dir / 'placement.json'}   curves: tensorboard --logdir {run_dir.parent}")
    return 0
