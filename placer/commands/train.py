"""`placer train`: learn a placement of a model on the local devices from measured step times."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import fields, replace
from pathlib import Path

from placer.commands.common import (add_devices_arg, add_engine_arg, add_graph_args, add_objective_args,
                                    add_pipeline_args, check_writable, hardware_settings, ignored_on_cluster,
                                    model_settings, option, refuse_ignored_on_cluster, step_settings)
from placer.errors import PlacerError
from placer.policy.hparams import Hyperparameters
from placer.policy.phases import DEFAULT_REAL_FRACTION, REWARDS

# learning options whose default depends on the others (the job chooses): what the help says of them
CHOSEN_BY_THE_JOB = {"warm_start": "local_search with --cluster and --samples, else best_baseline"}

HELP = "learn a fast placement with the seq2seq policy and REINFORCE"


def register(subparsers) -> None:
    """Add the `train` sub-command."""
    from placer.jobs.train import DEFAULT_BUDGET_S

    parser = subparsers.add_parser(
        "train", help=HELP,
        description="Group the model's ops, measure every single-device placement, then sample "
                    "placements from a seq2seq policy, score them (--reward: measured for real, simulated, "
                    "or simulated then real) and improve the policy with REINFORCE until the budget is "
                    "spent. The best placements and the single devices are then measured again side by "
                    "side on the real devices: those figures are the ones reported. The run folder gets "
                    "TensorBoard events (tensorboard --logdir runs/), checkpoint.pt, placement.json (the "
                    "best placement measured, for `placer apply`) and summary.json.")
    add_graph_args(parser)
    add_devices_arg(parser)
    add_objective_args(parser)
    add_engine_arg(parser)
    add_pipeline_args(parser)
    _add_worker_args(parser)
    parser.add_argument("--budget", default=None, metavar="TIME",
                        help=f"training time, like 90s, 10m or 1h (default {DEFAULT_BUDGET_S / 60:g}m unless --samples is given)")
    parser.add_argument("--samples", type=int, default=None, metavar="N",
                        help="stop after N sampled placements in all (whole updates; on a --cluster every placement "
                             "simulated counts, local search's and the policy's own and single-device ones too, and "
                             "the run never goes past N; a resumed run continues to N)")
    parser.add_argument("--polish", type=float, default=None, metavar="F",
                        help="with --cluster and --samples: spend this share of the samples (of those the local "
                             "search warm start leaves) polishing the learned placement with local search in the "
                             "simulator (group, then node moves from it; every simulated placement counts in "
                             "--samples). Default 0.5 with --cluster, else 0. With --policy pretrained: the share of "
                             "the samples its zero-shot start leaves, polishing its best placement on its own groups "
                             "(default 0.75 with --reward simulated and --samples)")
    parser.add_argument("--run-dir", default=None, metavar="DIR",
                        help="run folder (default runs/<model>-<date>-<time>)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the policy, the sampling and the inputs (default 0)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its checkpoint")
    parser.add_argument("--groups", type=int, default=None, metavar="N",
                        help="number of co-located groups the policy places (default: as many as the co-location "
                             "heuristics leave, at least 20 per device, at most 256)")
    parser.add_argument("--grouping", default="partition", choices=["partition", "metis", "topo", "colocate", "nodes"],
                        help="how ops are grouped (default partition; see placer/graph/grouping.py)")
    parser.add_argument("--warmup", type=int, default=1, metavar="N", help="untimed runs before timing a placement (default 1)")
    parser.add_argument("--repeats", type=int, default=3, metavar="N",
                        help="real rewards: interleaved rounds per batch at least (a batch runs beside the best "
                             "single device, each figure their paired ratio; 6 rounds at least, default 3 -> 6)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S",
                        help="limit of one step in seconds; slower placements fail (default 60)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--reward", default=None, choices=list(REWARDS),
        help="where a sample's reward comes from: real (measure every sampled placement on the devices), "
             "simulated (the simulator with costs profiled once on these devices and cached: thousands of "
             "samples a minute), or hybrid (the simulator until the policy converges or the first "
             "1 - --real-fraction of the budget is spent, then real measurement). Whatever the reward, the "
             "figures reported at the end are real measurements, taken side by side. Default hybrid: the "
             "simulator, profiled on these devices, learns in seconds what real measurement needs hours for, "
             "and the real phase and the closing comparison check it on the devices. The graph policy "
             "(--policy pretrained|FILE) takes simulated (its default: the cluster's description) or real "
             "(measured on the cluster's devices; the cluster must be this machine, as describe-local writes it), "
             "and its figures are the reward's, labelled simulated or measured")
    parser.add_argument("--real-fraction", type=float, default=DEFAULT_REAL_FRACTION, metavar="F",
                        help="hybrid: share of the budget (or of --samples, in whole updates) measured for "
                             "real at the end; --resume with the same --samples continues exactly "
                             "(default %(default)s)")
    parser.add_argument("--cost-model", default="profiled", choices=["profiled", "analytic"],
                        help="costs of the simulator: profiled (each op and transfer timed on these devices "
                             "once, cached in $PLACER_CACHE or ~/.cache/placer) or analytic (from FLOPs and bytes: "
                             "deterministic, for tests) (default %(default)s)")
    parser.add_argument("--refresh-profile", action="store_true",
                        help="profile the devices again even when a cached profile exists")
    parser.add_argument("--policy", default="seq2seq", metavar="seq2seq|pretrained|POLICY.pt",
                        help="what learns: seq2seq (default; a fresh per-graph policy) or the graph policy, fine-tuned "
                             "from the pre-trained one shipped with placer (pretrained) or from a placer pretrain "
                             "policy.pt; the graph policy reads a --cluster's devices and learns on its simulated "
                             "rewards (or real ones on this machine's, --reward real), for --samples or --budget, "
                             "and writes placement.json, policy.pt, checkpoint.pt (--resume) and summary.json to "
                             "the run folder")
    parser.add_argument("--space", default=None, choices=["plans", "placement"],
                        help="plans (the default) ends the run with a search over plans that split ops (DDP, "
                             "FSDP, tensor, pipeline and REINFORCE over plans, a fifth of --samples), plan.json "
                             "where one beats the placement; on this machine's devices its finalists are measured "
                             "for real, and a run with --micro-batches searches plans only when asked; placement "
                             "keeps to whole ops")
    parser.add_argument("--no-compare", action="store_true",
                        help="skip the closing comparison (every baseline placer, random search and the learned "
                             "placements measured side by side, as placer compare --include-rl does)")
    hp = parser.add_argument_group("learning, the seq2seq learner's (defaults and where they come from: "
                                   "placer/policy/hparams.py)")
    for f in fields(Hyperparameters):   # default None: only those typed reach the job (the graph policy refuses them)
        default = CHOSEN_BY_THE_JOB.get(f.name, f.default)
        hp.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=None,
                        metavar=f.type.upper() if isinstance(f.type, str) else None,
                        help=f.metadata["help"] + f" (default {default})")
    ignored_on_cluster(parser, "--engine", "--warmup", "--repeats", "--timeout", "--cost-model", "--refresh-profile")
    parser.set_defaults(func=run)


def parse_budget(text: str) -> float:
    """'90s' / '10m' / '1.5h' / '600' -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text or "")
    if not m or float(m.group(1)) <= 0:
        raise PlacerError(f"cannot read the budget {text!r}; write it like 90s, 10m or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def _add_worker_args(parser: argparse.ArgumentParser) -> None:
    """--workers and --ray-address."""
    group = parser.add_argument_group("workers (measure many placements at once on Ray: pip install -e '.[ray]')")
    group.add_argument("--workers", type=int, default=None, metavar="N",
                       help="measure the real samples on N workers at once, each owning its own copy of "
                            "--devices: its own GPUs (name them cuda:0..D-1) or its own cores (one per thread "
                            "of each cpu:K device). Default: measure in this process, one placement at a time")
    group.add_argument("--ray-address", default=None, metavar="HOST:PORT|auto",
                       help="join the running Ray cluster at HOST:PORT (or auto: the one this machine runs) "
                            "instead of starting a local Ray runtime; each node runs workers on its own devices")


def settings_from_args(args: argparse.Namespace):
    """The `TrainSettings` of the command line."""
    from placer.jobs.train import TrainSettings

    budget_s = parse_budget(args.budget) if args.budget else None   # neither: the job's default
    learning = {f.name: getattr(args, f.name) for f in fields(Hyperparameters) if getattr(args, f.name) is not None}
    return TrainSettings(model_settings(args), hardware_settings(args), step_settings(args), samples=args.samples,
                         budget_s=budget_s, run_dir=Path(args.run_dir) if args.run_dir else None, resume=args.resume,
                         seed=args.seed, policy=args.policy, reward=args.reward, real_fraction=args.real_fraction,
                         polish=args.polish, groups=args.groups, grouping=args.grouping, warmup=option(args, "warmup"),
                         repeats=option(args, "repeats"), timeout=option(args, "timeout"),
                         cost_model=option(args, "cost_model"),
                         refresh_profile=args.refresh_profile, workers=args.workers, ray_address=args.ray_address,
                         closing_comparison=not args.no_compare, progress=not args.no_progress, learning=learning,
                         space=args.space)


def run(args: argparse.Namespace) -> int:
    """Train, then print the best placement's step time against the best single device."""
    from placer.jobs.train import holds_run, run_folder, train

    refuse_ignored_on_cluster(args)
    settings = settings_from_args(args)
    # the folder named once (a default one carries the time), and tried before any work
    settings = replace(settings, run_dir=check_writable(run_folder(settings), "--run-dir", folder=True))
    outcome = train(settings)
    if outcome.summary:
        if outcome.learner == "seq2seq":
            code = _print_seq2seq(outcome, settings, args.verbose)
        else:
            from placer.commands.train_graph_policy import print_figures

            code = print_figures(outcome)
    else:
        code = 0
    if outcome.interrupted:
        if holds_run(outcome.run_dir):
            print(f"interrupted; continue with --resume --run-dir {outcome.run_dir}")
        else:   # cut before the folder held anything
            print("interrupted", file=sys.stderr)
        return 130
    return code


def _print_seq2seq(outcome, settings, verbose: bool = False) -> int:
    """The seq2seq run's figures, then its closing comparison's table."""
    from placer.evaluate.report import TABLE, closing_lines
    from placer.jobs.searches import samples_line
    from placer.policy.run_summary import speedup_text

    s, run_dir = outcome.summary, outcome.run_dir
    if outcome.interrupted and not s["confirmed_side_by_side"]:
        print("interrupted: training's own figures, not measured again side by side (the resumed run's end is; "
              f"or measure them now with placer compare --graph {settings.model.graph} --include-rl {run_dir})")
    if s["confirmed_side_by_side"]:
        print("simulated again side by side at the end (cluster "
              f"{settings.hardware.described.name}, roofline cost model):" if settings.hardware.simulated_only else
              "measured again side by side at the end:")
    for device, t in s["single_device_step_times"].items():
        print(f"  single device {device:<10} " + (f"{t * 1e3:10.3f} ms" if t is not None else "failed"))
    if s["best_step_time"] is None:
        print("no placement ran successfully; see summary.json for the failures")
        return 1
    by = s["samples_by_reward"]
    done = f"{s['samples']} samples" if not by["simulated"] else \
        f"{by['simulated']} simulated + {by['real']} real samples"
    greedy = s["greedy"]
    if greedy is None:   # on a cluster every simulation counts, and no sample was left for it
        print("  the policy's placement  not simulated: no samples were left for it")
    else:
        print("  the policy's placement  " + (f"{greedy['step_time'] * 1e3:10.3f} ms" if greedy.get("step_time")
                                               else "    failed") + "  (greedy decoding: what it learned)")
    print(f"  best placement found    {s['best_step_time'] * 1e3:10.3f} ms  ({s['best_source']}, "
          f"{done}, {s['wall_time_s']:.0f} s of training)")
    if speedup_text(s):
        print(speedup_text(s))
    if outcome.searched is not None:
        print(samples_line(s, outcome.searched.samples, outcome.reinforced, settings.samples))
    print(s.get("note") or _convergence_text(s))
    print(f"placement: {run_dir / 'placement.json'}   curves: tensorboard --logdir {run_dir.parent}")
    if outcome.comparison is not None:   # its whole table in the run folder (and with -v); its summary last
        print("\n".join(closing_lines(outcome.comparison, run_dir / "compare" / TABLE, verbose)))
    return 0


def _convergence_text(s: dict) -> str:
    """One line on whether the policy settled, with the figures that say so."""
    entropy, tail = s["entropy_per_group"], s["mean_sampled_step_time_last_10pct"]
    figures = (f"entropy {entropy:.3f} nats per group" if entropy is not None else "no update made") + \
        (f", last 10% of samples {tail * 1e3:.2f} ms on average" if tail else "")
    if s["converged"]:
        return f"the policy converged ({figures})"
    return (f"the policy has NOT converged ({figures}; converged means at most 0.1 nats per group): "
            "its placement is still a draw among many, train longer (--resume with more --samples or --budget)")
