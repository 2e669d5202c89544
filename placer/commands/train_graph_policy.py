"""`placer train --policy pretrained|POLICY.pt`: fine-tune the graph policy on one graph and cluster."""

from __future__ import annotations

import argparse
import hashlib
import json
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
    """Fine-tune the --policy checkpoint on --graph and --cluster, rewards simulated or (--reward
    real, the cluster being this machine) measured, for --samples or `budget_s` seconds in all;
    print the figures. --resume continues the run in `run_dir`."""
    from placer.commands.common import check_engine_args, cluster_from_args, load_graph_from_args, refuse_real
    from placer.policy.gnn.checkpoint import load_policy
    from placer.policy.gnn.episode import make_episode
    from placer.policy.gnn.finetune import finetune
    from placer.policy.gnn.learn import LearnConfig
    from placer.policy.gnn.rewards import MeasuredRewards, SimulatedRewards

    path = policy_path(args.policy)
    if not args.cluster:
        raise PlacerError("the graph policy reads the devices from a described cluster: add --cluster NAME|FILE "
                          "(placer cluster describe-local describes this machine, for --reward real), or use "
                          "--policy seq2seq")
    if args.reward == "hybrid":
        raise PlacerError("--policy pretrained fine-tunes with --reward simulated (its default) or real; hybrid is "
                          "the seq2seq learner's (--policy seq2seq)")
    if args.workers or args.objective != "inference" or args.micro_batches != 1:
        raise PlacerError("--policy pretrained fine-tunes on inference steps, one placement at a time; drop "
                          "--workers, --objective training and --micro-batches, or use --policy seq2seq")
    if args.reward == "real":
        refuse_real(args, "--reward real")   # the same refusal as seq2seq's, on hardware this machine is not
        check_engine_args(args)
    policy, info = load_policy(path)
    graph = load_graph_from_args(args)
    cluster = cluster_from_args(args)
    episode = make_episode(graph, cluster, name=f"{graph.source}@{cluster.name}")
    rewards = MeasuredRewards(episode, _measurer(args, graph, episode, run_dir)) if args.reward == "real" \
        else SimulatedRewards(episode)
    print(f"fine-tuning the graph policy ({args.policy}) on {graph.source} ({len(graph.nodes)} ops in "
          f"{episode.features.n_groups} groups) on {cluster.name}, rewards {rewards.figures}; run folder {run_dir}")
    # what --resume must find again: another graph, cluster, policy file or reward is another run
    identity = {"graph_sha256": graph.sha256, "cluster": cluster.name,
                "cluster_sha256": _digest(json.dumps(cluster.to_dict(), sort_keys=True).encode()),
                "policy_sha256": _digest(path.read_bytes())}
    result = finetune(policy, episode, run_dir, LearnConfig(), rewards=rewards, samples=args.samples,
                      budget_s=budget_s, seed=args.seed, resume=args.resume, identity=identity,
                      run_info={"graph": graph.source, "cluster": cluster.name, "policy": str(path),
                                "pretrained_info": {k: info[k] for k in ("corpus", "command") if k in info}},
                      log=print)
    _print_figures(result, rewards.figures, run_dir)
    if result.interrupted:
        print(f"interrupted; continue with --resume --run-dir {run_dir}")
        return 130
    return 0 if result.summary["best_step_time"] is not None else 1


def _print_figures(result, word: str, run_dir: Path) -> None:
    """The closing figures, each labelled as what it is: `word` (simulated or measured)."""
    s = result.summary
    print(f"  zero-shot placement      {_ms(s['zero_shot_step_time'], word)}")
    if not result.interrupted:
        print(f"  fine-tuned (greedy)      {_ms(s['greedy_step_time'], word)}")
    print(f"  best placement found     {_ms(s['best_step_time'], word)} ({s['best_source']}, {s['samples']} samples "
          f"{word}, {s['seconds']:.0f} s)")
    if s["best_heuristic_step_time"] and s["best_step_time"]:
        print(f"  best list heuristic      {_ms(s['best_heuristic_step_time'], word)} ({s['best_heuristic']}): the "
              f"placement is {s['best_heuristic_step_time'] / s['best_step_time']:.3f}x as fast")
    if s["best_step_time"] is None:
        print(f"no placement ran on the devices; see {run_dir / 'summary.json'}")
    else:
        print(f"placement: {run_dir / 'placement.json'}   curves: tensorboard --logdir {run_dir.parent}")


def _measurer(args: argparse.Namespace, graph, episode, run_dir: Path):
    """Real rewards as seq2seq measures them: on the cluster's devices (its memory as caps), each
    batch in interleaved rounds beside the single device the cluster's description finds fastest
    (`paired_rewards`)."""
    import numpy as np

    from placer.commands.common import devices_from_args
    from placer.commands.train import paired_rewards
    from placer.measure.measurer import MeasureProtocol, measurer_for

    real = measurer_for(args.engine, graph, devices_from_args(args),
                        MeasureProtocol(args.warmup, args.repeats, args.timeout), seed=args.seed)
    names, groups = episode.cluster.device_names, episode.features.n_groups
    single = episode.step_times(np.repeat(np.arange(len(names))[:, None], groups, axis=1))   # inf: does not fit
    return paired_rewards(args, graph, real, dict(zip(names, single.tolist())), run_dir)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _ms(seconds: float | None, word: str) -> str:
    return f"{seconds * 1e3:10.3f} ms {word}" if seconds is not None else f"    failed ({word})"
