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


def polish_share(polish: float | None, reward: str, samples: int | None) -> float:
    """The share of the samples the zero-shot start (and the greedy chains at the end) leave that
    polishes the fine-tune's best placement (--polish): by default `DEFAULT_POLISH` (0.75) with
    simulated rewards and --samples, else none; refused in one line where it cannot run."""
    from placer.commands.train_search import check_share
    from placer.policy.gnn.finetune import DEFAULT_POLISH

    if polish is None:
        return DEFAULT_POLISH if reward == "simulated" and samples else 0.0
    if check_share(polish) and (reward != "simulated" or not samples):
        raise PlacerError("--polish moves in the simulator within a sample count: it needs --reward simulated and "
                          "--samples N; drop --polish")
    return polish


def finetune_from_args(args: argparse.Namespace, run_dir: Path, budget_s: float | None) -> int:
    """Fine-tune the --policy checkpoint on --graph and --cluster, rewards simulated or (--reward
    real, the cluster being this machine) measured, for --samples or `budget_s` seconds in all;
    print the figures. --resume continues the run in `run_dir`."""
    from placer.commands.common import check_engine_args, cluster_from_args, load_graph_from_args, refuse_real
    from placer.policy.gnn.checkpoint import load_policy
    from placer.policy.gnn.episode import make_episode
    from placer.commands.place import SAMPLED_CHAINS
    from placer.policy.gnn.finetune import finetune, start_chains
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
                      chains=start_chains(args.samples, policy.config.rounds, rewards.reward, SAMPLED_CHAINS),
                      polish=polish_share(args.polish, rewards.reward, args.samples),
                      run_info={"graph": graph.source, "cluster": cluster.name, "policy": str(path),
                                "pretrained_info": {k: info[k] for k in ("corpus", "command") if k in info}},
                      log=print)
    _print_figures(result, rewards.figures, run_dir)
    if result.interrupted:
        print(f"interrupted; continue with --resume --run-dir {run_dir}")
        return 130
    return 0 if result.summary["best_step_time"] is not None else 1


def _print_figures(result, word: str, run_dir: Path) -> None:
    """The closing figures, each labelled as what it is: `word` (simulated or measured); measured
    again side by side when the closing rounds ran."""
    s = result.summary
    if s.get("confirmed_side_by_side"):
        _print_side_by_side(s)
    else:
        _print_training_figures(result, word)
    if s["best_step_time"] is None:
        print(f"no placement ran on the devices; see {run_dir / 'summary.json'}")
    else:
        print(f"placement: {run_dir / 'placement.json'}   curves: tensorboard --logdir {run_dir.parent}")


def _print_side_by_side(s: dict) -> None:
    """The closing rounds' figures: each placement's time with its interval and its speedup over the
    best single device, then the verdicts of the one written."""
    from placer.policy.gnn.closing import ms_with_interval
    from placer.policy.run_summary import judged_text, speedup_text

    side, trained = s["side_by_side"], s["during_training"]
    if trained["best_step_time"] is not None:
        print(f"  during training: best placement found {trained['best_step_time'] * 1e3:.3f} ms measured once "
              f"({trained['best_source']}; {s['samples']} samples measured, {s['seconds']:.0f} s)")
    how = f"{side['rounds']} interleaved rounds, 95% intervals" if side["rounds"] else "one after the other"
    print(f"measured again side by side at the end ({how}" + (f", stopped at the {side['capped']} cap" if side["capped"]
                                                             else "") + "; speedups over the best single device):")
    rows = side["placements"]
    for name, row in rows.items():
        if row["same_as"]:
            figure = f"the same placement as the {rows[row['same_as']]['label']}"
        elif row["step_time"] is None:
            figure = f"failed ({row['failure']})"
        else:
            judged = row["vs_best_single_device"]
            figure = ms_with_interval(row) + (f"   {judged_text(judged)}" if judged
                                              else "   the best single device" if name == side["best_single_device"]
                                              else "")
        print(f"  {row['label']:<32} {figure}")
    print(side["note"] or f"placement.json: the {rows[side['fastest']]['label']}, the fastest in the closing rounds")
    if s["vs_best_single_device"]:
        print(speedup_text(s))
    if s["vs_best_heuristic"]:
        print(f"against the best list heuristic ({s['best_heuristic']}): {judged_text(s['vs_best_heuristic'])}")


def _print_training_figures(result, word: str) -> None:
    s = result.summary
    print(f"  zero-shot placement      {_ms(s['zero_shot_step_time'], word)}")
    if not result.interrupted:
        print(f"  fine-tuned (greedy)      {_ms(s['greedy_step_time'], word)}")
    print(f"  best placement found     {_ms(s['best_step_time'], word)} ({s['best_source']}, {s['samples']} samples "
          f"{word}, {s['seconds']:.0f} s)")
    if s["best_heuristic_step_time"] and s["best_step_time"]:
        print(f"  best list heuristic      {_ms(s['best_heuristic_step_time'], word)} ({s['best_heuristic']}): the "
              f"placement is {s['best_heuristic_step_time'] / s['best_step_time']:.3f}x as fast")


def _measurer(args: argparse.Namespace, graph, episode, run_dir: Path):
    """Real rewards as seq2seq measures them: on the cluster's devices (its memory as caps), each
    batch in interleaved rounds beside the single device the cluster's description finds fastest
    (`paired_rewards`)."""
    import numpy as np

    from placer.commands.common import devices_from_args, paired_rewards
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
