"""`placer train`: learn a placement of a model on the local devices from measured step times."""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import fields, replace
from pathlib import Path

from placer.commands.common import (add_devices_arg, cluster_from_args, paired_rewards, refuse_real, simulated_only, add_engine_arg, add_graph_args, add_objective_args,
                                    add_pipeline_args, check_engine_args, ignored_on_cluster, refuse_ignored_on_cluster)
from placer.errors import PlacerError
from placer.policy.hparams import Hyperparameters
from placer.policy.phases import DEFAULT_REAL_FRACTION, REWARDS, RewardPlan
from placer.workers.cli import add_worker_args, finish_pool, pool_from_args

DEFAULT_BUDGET = "10m"
# learning options whose default depends on the others (`run` chooses): what the help says of them
CHOSEN_IN_RUN = {"warm_start": "local_search with --cluster and --samples, else best_baseline"}


def register(subparsers) -> None:
    """Add the `train` sub-command."""
    parser = subparsers.add_parser(
        "train", help="learn a fast placement with the seq2seq policy and REINFORCE",
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
    add_worker_args(parser)
    parser.add_argument("--budget", default=None, metavar="TIME",
                        help=f"training time, like 90s, 10m or 1h (default {DEFAULT_BUDGET} unless --samples is given)")
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
    parser.add_argument("--no-compare", action="store_true",
                        help="skip the closing comparison (every baseline placer, random search and the learned "
                             "placements measured side by side, as placer compare --include-rl does)")
    hp = parser.add_argument_group("learning (defaults and where they come from: placer/policy/hparams.py)")
    for f in fields(Hyperparameters):
        later = CHOSEN_IN_RUN.get(f.name)
        hp.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=None if later else f.default,
                        metavar=f.type.upper() if isinstance(f.type, str) else None,
                        help=f.metadata["help"] + f" (default {later or '%(default)s'})")
    ignored_on_cluster(parser, "--engine", "--warmup", "--repeats", "--timeout", "--cost-model", "--refresh-profile")
    parser.set_defaults(func=run)


def parse_budget(text: str) -> float:
    """'90s' / '10m' / '1.5h' / '600' -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text or "")
    if not m or float(m.group(1)) <= 0:
        raise PlacerError(f"cannot read the budget {text!r}; write it like 90s, 10m or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def _run_dir(args: argparse.Namespace) -> Path:
    from placer.commands.common import check_writable
    from placer.policy.checkpoint import FILENAME
    from placer.policy.run_start import FILENAME as START

    if args.run_dir is None:
        if args.resume:
            raise PlacerError("--resume needs the --run-dir of the run to continue")
        return check_writable(Path("runs") / f"{Path(args.graph).stem}-{time.strftime('%Y%m%d-%H%M%S')}",
                              "--run-dir", folder=True)
    run_dir = Path(args.run_dir)
    holds_run = (run_dir / FILENAME).exists() or (run_dir / START).exists()
    if not args.resume and holds_run:
        raise PlacerError(f"{run_dir} already holds a run; add --resume to continue it or pick another --run-dir")
    if args.resume and not holds_run:
        raise PlacerError(f"no checkpoint in {run_dir} to resume from; drop --resume to start a new run there")
    return check_writable(run_dir, "--run-dir", folder=True)


def run(args: argparse.Namespace) -> int:
    """Train, then print the best placement's step time against the best single device."""
    from placer.commands import train_search as searches
    from placer.policy.run_lock import hold_run_folder
    from placer.policy.run_start import FILENAME as START

    if args.samples is not None and args.samples < 1:
        raise PlacerError("--samples must be at least 1")
    refuse_ignored_on_cluster(args)
    budget_s = parse_budget(args.budget) if args.budget else (None if args.samples else parse_budget(DEFAULT_BUDGET))
    if args.policy != "seq2seq":
        from placer.commands.train_graph_policy import finetune_from_args

        args.reward = args.reward or "simulated"   # the graph policy's default: it was pre-trained on the simulator
        run_dir = _run_dir(args)
        with hold_run_folder(run_dir):
            return finetune_from_args(args, run_dir, budget_s)
    args.reward = args.reward or "hybrid"
    described = simulated_only(args)   # --cluster: hardware this machine is not, every figure simulated
    args.warm_start = searches.default_warm_start(args, described)
    hp = Hyperparameters(**{f.name: getattr(args, f.name) for f in fields(Hyperparameters)})
    if hp.samples_per_update < 1 or hp.hidden_size < 1:
        raise PlacerError("--samples-per-update and --hidden-size must be at least 1")
    plan = RewardPlan(args.reward, args.real_fraction)   # refuses a bad --real-fraction early
    run_dir = _run_dir(args)
    with hold_run_folder(run_dir):
        try:
            return _train(args, run_dir, budget_s, hp, plan, described)
        except KeyboardInterrupt:   # before training (profiling, local search): what is known is in the folder
            if (run_dir / START).exists():
                print(f"interrupted; continue with --resume --run-dir {run_dir}")
            return 130


def _train(args: argparse.Namespace, run_dir: Path, budget_s: float | None, hp: Hyperparameters,
           plan: RewardPlan, described: bool) -> int:
    """The training job in the locked `run_dir`: what the run starts from (kept in the folder as
    each part is known, read back on --resume), the learner, the polish, the figures."""
    from placer.commands.common import (devices_from_args, load_graph_from_args, pipeline_from_args,
                                        training_spec_from_args)
    from placer.graph.grouping import group_graph
    from placer.costmodel.simulator import SimulatedMeasurer
    from placer.costmodel.training_costs import TrainingStepCosts
    from placer.placers import caps_from_devices
    from placer.placers.local_search import SearchInterrupted
    from placer.policy.checkpoint import FILENAME as CHECKPOINT
    from placer.policy.run_start import RunStart
    from placer.policy.trainer import train
    from placer.policy.search_warm_start import reinforce_share, search_warm_start
    from placer.policy.warm_start import plan_warm_start
    from placer.commands import train_search as searches

    graph = load_graph_from_args(args)
    devices = devices_from_args(args)
    from placer.policy.run_summary import speedup_text
    from placer.measure.measurer import MeasureProtocol
    from placer.measure.measurer import measurer_for

    training = training_spec_from_args(args, graph)
    pipeline = pipeline_from_args(args)   # --micro-batches: every step, real or simulated, is pipelined
    if pipeline.pipelined and args.workers:
        raise PlacerError("--workers measures one input per step; drop --micro-batches or --workers")
    check_engine_args(args)
    protocol = MeasureProtocol(args.warmup, args.repeats, args.timeout, objective=args.objective)
    polish = searches.polish_share(args, described)
    if described and (plan.reward != "simulated" or args.workers):
        refuse_real(args, "--reward " + plan.reward if plan.reward != "simulated" else "--workers")
    # from here on the folder is a run: what it starts from is kept there as it becomes known
    identity = {"graph_sha256": graph.sha256, "devices": [d.name for d in devices], "groups": args.groups,
                "grouping": args.grouping, "warm_start": hp.warm_start, "seed": args.seed,
                "costs": cluster_from_args(args).name if described else args.cost_model, "engine": args.engine,
                "objective": {"objective": args.objective, **(training.to_dict() if training is not None else {})},
                "pipeline": [pipeline.micro_batches, pipeline.schedule] if pipeline.pipelined else None}
    start = RunStart.resume(run_dir, identity) if args.resume else RunStart.begin(run_dir, identity)
    if described:
        from placer.costmodel.roofline import RooflineCostModel, cluster_measurer

        cost = RooflineCostModel(cluster_from_args(args), graph)
        # the closing confirmation too is simulated, on the cluster's costs; the cluster named in its
        # protocol is part of the run's identity (resume refuses another)
        confirm = cluster_measurer(cluster_from_args(args), graph, cost, training=training, pipeline=pipeline)
    else:
        # Real measurement, for the rewards unless they are simulated, and in every mode for the
        # side-by-side confirmation at the end: the reported figures are real measurements.
        confirm = measurer_for(args.engine, graph, devices, protocol, seed=args.seed, training=training,
                               pipeline=pipeline)
        # The cost model serves the warm start, the closing comparison and, unless the reward is real, the samples.
        cost = _cost_model(args, graph, devices, confirm, start)
    # Real rewards are paired: each batch in interleaved rounds with the best single device
    profiled = getattr(getattr(cost, "profile", None), "step_times", {}) or {}
    measurer = paired_rewards(args, graph, confirm, profiled, run_dir) if plan.reward != "simulated" else None
    pool = pool_from_args(args, graph, devices, protocol, training, args.engine)   # --workers: many placements measured at once
    measurer = pool if pool is not None else measurer
    simulator = None if plan.reward == "real" else confirm if described else \
        SimulatedMeasurer(graph, devices, cost, training=training, pipeline=pipeline)
    warm = searched = None
    learn_samples = args.samples - int(args.samples * polish) if polish else args.samples
    names, caps = [d.name for d in devices], caps_from_devices(devices)
    # the baselines it starts from see a training step's costs per node on the training objective
    # (and the polish's moves too: built once for both)
    needed = hp.warm_start != "none" or polish
    costs = cost if training is None or not needed else TrainingStepCosts(graph, names, cost, training)
    grouping = start.grouping() or group_graph(graph, args.groups, len(devices), args.grouping)
    if hp.warm_start == "local_search":   # local search's own run first; the learner gets what it leaves
        searched = start.searched(args.samples)
        if searched is None:
            progress = start.search_progress or {"budget": args.samples, "state": None}
            try:
                searched = search_warm_start(graph, names, costs, caps, grouping, progress["budget"], args.samples,
                                             seed=args.seed, pipeline=pipeline, resume=progress["state"])
            except SearchInterrupted as cut:
                start.keep_search_progress(progress["budget"], cut.state)
                raise
        learn_samples, per_update = reinforce_share(searched.left, polish,
                                                    start.samples_per_update or hp.samples_per_update,
                                                    len(devices), resumed=start.samples_per_update is not None)
        start.keep_searched(searched, per_update)
        hp = replace(hp, samples_per_update=per_update)
        warm = searched.warm
        print(searches.searched_text(searched, learn_samples, polishing=bool(polish)))
    elif hp.warm_start != "none":
        warm = start.warm()
        if warm is None:
            warm = plan_warm_start(graph, names, costs, caps, grouping, hp.warm_start, seed=args.seed,
                                   pipeline=pipeline)
            start.keep_warm(warm)
    else:
        start.keep_grouping(grouping)
    earlier = searches.earlier_polish(args, run_dir)   # on --resume: samples polishing spent, which still count
    if earlier and args.samples:
        learn_samples = min(learn_samples, (searched.left if searched else args.samples) - earlier["samples"])
    if warm is not None:
        grouping = warm.grouping
        print(f"warm start: the policy first imitates {warm.source} ({warm.simulated_step_time * 1e3:.2f} ms "
              f"simulated), on its {len(grouping)} groups split where {warm.source} cuts them")
    print(f"training a placement of {graph.source} ({len(graph.nodes)} ops in {len(grouping)} groups) "
          f"on {', '.join(str(d) for d in devices)}, {_reward_text(plan)}; run folder {run_dir}")
    result = train(graph, measurer, grouping, run_dir, hp, samples=learn_samples, budget_s=budget_s, seed=args.seed,
                   resume=(run_dir / CHECKPOINT).exists(), progress=not args.no_progress, confirm=confirm,
                   reward=plan.reward, simulator=simulator, real_fraction=plan.real_fraction, warm_start=warm,
                   counts_evaluations=described,   # the searches it is compared with count every simulation
                   run_info={"graph": graph.source, "reward": plan.reward, "objective": args.objective,
                             **({"loss": training.loss.kind, "optimizer": training.optimizer.name}
                                if training is not None else {}),
                             "cost_model": ("roofline" if described else args.cost_model)
                             if simulator is not None else None,
                             **({"cluster": cluster_from_args(args).name, "simulated": True} if described else {}),
                             "engine": args.engine,
                             **({"micro_batches": pipeline.micro_batches, "schedule": pipeline.schedule}
                                if pipeline.pipelined else {}),
                             "warmup": args.warmup, "repeats": args.repeats, "timeout": args.timeout,
                             "workers": args.workers, "ray_address": args.ray_address})
    finish_pool(pool)
    reinforced, policy_best = result.summary["samples"], result.summary["best_step_time"]
    if polish or earlier:
        # what local search and the learner left of --samples; None: nothing to polish now
        left = max(0, args.samples - reinforced - (searched.samples if searched else 0)) \
            if polish and not result.interrupted and policy_best is not None else None
        searches.polish(graph, names, costs, caps, pipeline, run_dir, left, args.seed, result.summary, reinforced,
                        earlier)
    if searched is not None:
        searches.finish_searched(searched, result.summary, reinforced, hp.samples_per_update, policy_best, confirm,
                                 run_dir)
    s = result.summary
    if result.interrupted and not s["confirmed_side_by_side"]:
        print("interrupted: training's own figures, not measured again side by side (the resumed run's end is; "
              f"or measure them now with placer compare --graph {args.graph} --include-rl {run_dir})")
    if s["confirmed_side_by_side"]:
        print("simulated again side by side at the end (cluster "
              f"{cluster_from_args(args).name}, roofline cost model):" if described else
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
    if searched is not None:
        print(f"samples: {searched.samples} local search + {reinforced} REINFORCE + "
              f"{s['samples_by_phase']['polish']} polish of {args.samples}")
    print(s.get("note") or _convergence_text(s))
    print(f"placement: {run_dir / 'placement.json'}   curves: tensorboard --logdir {run_dir.parent}")
    if not args.no_compare and not result.interrupted:
        _closing_comparison(args, graph, devices, cost, run_dir, training, pipeline)
    if result.interrupted:
        print(f"interrupted; continue with --resume --run-dir {run_dir}")
        return 130
    return 0


def _reward_text(plan: RewardPlan) -> str:
    if plan.reward == "hybrid":
        return f"reward simulated until the policy converges (at most {1 - plan.real_fraction:.0%} of the budget), then real"
    return f"reward {plan.reward}"


def _convergence_text(s: dict) -> str:
    """One line on whether the policy settled, with the figures that say so."""
    entropy, tail = s["entropy_per_group"], s["mean_sampled_step_time_last_10pct"]
    figures = (f"entropy {entropy:.3f} nats per group" if entropy is not None else "no update made") + \
        (f", last 10% of samples {tail * 1e3:.2f} ms on average" if tail else "")
    if s["converged"]:
        return f"the policy converged ({figures})"
    return (f"the policy has NOT converged ({figures}; converged means at most 0.1 nats per group): "
            "its placement is still a draw among many, train longer (--resume with more --samples or --budget)")


def _closing_comparison(args: argparse.Namespace, graph, devices, cost, run_dir: Path, training=None,
                        pipeline=None) -> None:
    """Every baseline placer, random search with the run's samples, and the run's placements,
    measured side by side now: the figures that say whether learning beat the heuristics. Measured
    as `placer compare --include-rl` measures with no rounds options: in its blocks (`BLOCKS`), so
    that the intervals and verdicts hold the variation between runs, as compare's do."""
    from placer.commands.compare import BLOCKS, comparison_for_run, simulated_comparison
    from placer.placers import PLACERS
    from placer.evaluate.report import format_table, write_outputs
    from placer.measure.rounds import RoundsProtocol

    if simulated_only(args):
        print("simulating every baseline placer and the learned placements side by side ...")
        comparison = simulated_comparison(graph, devices, cluster_from_args(args), list(PLACERS), run_dir, None,
                                          args.seed, training=training, pipeline=pipeline)
    else:
        print("measuring every baseline placer and the learned placements side by side ...")
        comparison = comparison_for_run(graph, devices, cost, run_dir, RoundsProtocol(seed=args.seed, blocks=BLOCKS),
                                        seed=args.seed, timeout=args.timeout, training=training, pipeline=pipeline,
                                        engine=args.engine)
    print(format_table(comparison))
    write_outputs(comparison, run_dir / "compare", plot=False)


def _cost_model(args: argparse.Namespace, graph, devices, real, start):
    """The --cost-model costs: profiled on these devices (cached) or analytic. A run learns on its
    own copy of the profile (`start`), read back on --resume, never the shared cache again."""
    from placer.costmodel.profiled import ProfiledCostModel
    from placer.costmodel.simulator import AnalyticCostModel

    if args.cost_model == "analytic":
        return AnalyticCostModel([d.name for d in devices])
    kept = start.profile()
    if kept is not None:
        print(f"profiled costs read from the run's own copy, {start.run_dir / 'profile.json'}")
        return ProfiledCostModel(kept, start.run_dir / "profile.json", from_cache=True)
    from placer.costmodel.profile_cache import profiled_cost_model

    started = time.monotonic()
    costs = profiled_cost_model(graph, devices, refresh=args.refresh_profile, engine=args.engine,
                                        check_cached=True, prepared=real.prepared, training=real.training)
    if costs.from_cache:
        print(f"profiled costs read from {costs.path}")
    else:
        print(f"profiled every op on every device in {time.monotonic() - started:.0f} s; cached in {costs.path}")
    start.keep_profile(costs.profile)
    return costs
