"""The train job: learn a placement of a model, on local devices or a described cluster.

`train(TrainSettings(...))` is what `placer train` runs. The run folder holds what the run starts
from (`placer.policy.run_start`), the learner's checkpoint, placement.json and summary.json; it is
locked while the job writes there, and a run cut by Ctrl-C anywhere resumes with `resume=True`.
Two learners: the seq2seq policy with REINFORCE (`policy="seq2seq"`, `placer.policy.trainer`),
or the pre-trained graph policy fine-tuned (`policy="pretrained"` or a policy.pt,
`placer.policy.gnn.finetune`).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable

from placer.errors import PlacerError
from placer.jobs import paths, plan_phase, searches
from placer.jobs.plan_phase_here import least_samples, search_plans_here
from placer.jobs.place import SAMPLED_CHAINS
from placer.jobs.settings import HardwareSettings, ModelSettings, StepSettings, check_seed
from placer.policy.budget import GRAPH_POLICY_POLISH, SEQ2SEQ_POLISH, polish_share
from placer.policy.hparams import Hyperparameters
from placer.policy.phases import DEFAULT_REAL_FRACTION, RewardPlan
from placer.policy.summary_file import RunSummary

DEFAULT_BUDGET_S = 600.0   # training time when neither samples nor seconds are given
Report = Callable[[str], None]


@dataclass(frozen=True)
class TrainSettings:
    """Everything a training run is given; each field documented by its `placer train` option."""

    model: ModelSettings
    hardware: HardwareSettings = HardwareSettings()
    step: StepSettings = StepSettings()
    samples: int | None = None           # --samples: placements in all (None: by time)
    budget_s: float | None = None        # --budget in seconds (neither: DEFAULT_BUDGET_S)
    run_dir: Path | None = None          # --run-dir (None: runs/<model>-<date>-<time>)
    resume: bool = False
    seed: int = 0
    policy: str = "seq2seq"              # --policy: seq2seq, pretrained or a policy.pt
    reward: str | None = None            # --reward (None: the learner's default)
    real_fraction: float = DEFAULT_REAL_FRACTION
    polish: float | None = None          # --polish (None: the learner's default)
    groups: int | None = None
    grouping: str = "partition"
    warmup: int = 1
    repeats: int = 3
    timeout: float = 60.0
    cost_model: str = "profiled"
    refresh_profile: bool = False
    workers: int | None = None
    ray_address: str | None = None
    closing_comparison: bool = True      # --no-compare turns it off
    space: str | None = None             # --space: plans or placement (None: plans on a cluster, seq2seq)
    progress: bool = False
    # the seq2seq learner's hyperparameters given (Hyperparameters field -> value); the rest keep
    # their defaults, and the graph policy refuses any
    learning: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrainOutcome:
    """What a run produced: its folder, summary.json's content, whether Ctrl-C cut it, and the
    closing comparison (None when off or cut)."""

    run_dir: Path
    summary: RunSummary | None
    interrupted: bool
    learner: str
    comparison: Any = None
    searched: Any = None          # local search's run, the seq2seq learner's first phase on a cluster
    reinforced: int | None = None  # samples REINFORCE drew (with `searched`)
    figures: str = "measured"     # the graph policy's: what its figures are, simulated or measured


def holds_run(run_dir: Path) -> bool:
    """Whether `run_dir` holds a run to resume: a learner's checkpoint, or what a run started from."""
    from placer.policy.checkpoint import FILENAME
    from placer.policy.run_start import FILENAME as START

    return (Path(run_dir) / FILENAME).exists() or (Path(run_dir) / START).exists()


def run_folder(settings: TrainSettings) -> Path:
    """The run folder (`paths.run_folder`), refused in one line before any work when it cannot be
    what is asked."""
    return paths.run_folder(settings.run_dir, settings.resume, Path(settings.model.graph).stem, holds_run,
                            "no checkpoint in {run_dir} to resume from; drop --resume to start a new run there")


def train(settings: TrainSettings, report: Report = print) -> TrainOutcome:
    """Run the training job; `report` gets a line for each phase as it starts or ends. Returns the
    outcome with `interrupted` set when Ctrl-C cut it (resume with `resume=True`)."""
    from placer.policy.run_lock import hold_run_folder
    from placer.policy.run_start import RunStart

    check_seed(settings.seed)
    if settings.samples is not None and settings.samples < 1:
        raise PlacerError("--samples must be at least 1")
    if settings.samples is None and settings.budget_s is None:
        settings = replace(settings, budget_s=DEFAULT_BUDGET_S)
    learner = "seq2seq" if settings.policy == "seq2seq" else "graph policy"
    start = _check_graph_policy(settings) if learner == "graph policy" else _check_seq2seq(settings)
    run_dir = run_folder(settings)
    with hold_run_folder(run_dir):
        try:
            return start(settings, run_dir, report)
        except KeyboardInterrupt:   # before the learner began (profiling, local search): the folder keeps it
            return TrainOutcome(run_dir, None, True, learner)
        except PlacerError:
            if not settings.resume:   # refused before learning: the corrected command may start there again
                RunStart(run_dir).forget_unless_learning()
            raise


# --- the seq2seq learner ---

def _check_seq2seq(settings: TrainSettings):
    """The seq2seq learner's settings checked before any work; the function that runs it."""
    described = settings.hardware.simulated_only
    reward = settings.reward or "hybrid"
    plan = RewardPlan(reward, settings.real_fraction)   # refuses a bad --real-fraction early
    hp = _hyperparameters(settings, described)
    if hp.samples_per_update < 1 or hp.hidden_size < 1:
        raise PlacerError("--samples-per-update and --hidden-size must be at least 1")
    polish = polish_share(settings.polish, settings.samples, described, SEQ2SEQ_POLISH)
    if described and (reward != "simulated" or settings.workers):
        settings.hardware.refuse_real("--reward " + reward if reward != "simulated" else "--workers")
    if settings.workers is not None and reward == "simulated":
        raise PlacerError("--workers measures the real samples, and --reward simulated has none; "
                          "use --reward hybrid or real")
    if settings.ray_address and not settings.workers:
        raise PlacerError("--ray-address needs --workers N")
    if settings.resume and settings.refresh_profile:
        raise PlacerError("--refresh-profile does nothing on --resume: the run learns on its own profile "
                          "(profile.json in its folder) to the end; drop --refresh-profile")
    if settings.workers and settings.step.micro_batches != 1:
        raise PlacerError("--workers measures one input per step; drop --micro-batches or --workers")
    settings.step.check_engine()
    return partial(_seq2seq, plan=plan, hp=hp, polish=polish)


def searches_plans(settings: TrainSettings) -> bool:
    """Whether the run ends with a plan search: `--space plans`, the default. On this machine's
    devices a pipelined step (--micro-batches) keeps to placements unless asked: plans are measured
    here on one step, so far."""
    if settings.space not in (None, *plan_phase.SPACES):
        raise PlacerError(f"--space takes {' or '.join(plan_phase.SPACES)}, not {settings.space!r}")
    if settings.space is not None:
        return settings.space == "plans"
    return settings.hardware.simulated_only or not settings.step.pipeline().pipelined


def _hyperparameters(settings: TrainSettings, described: bool) -> Hyperparameters:
    """The seq2seq learner's hyperparameters: those given, the rest at their defaults, the warm
    start chosen by what the run is (`searches.default_warm_start`)."""
    known = {f.name for f in fields(Hyperparameters)}
    unknown = sorted(set(settings.learning) - known)
    if unknown:
        raise PlacerError(f"unknown learning option {unknown[0]!r}; see placer/policy/hparams.py")
    learning = dict(settings.learning)
    learning["warm_start"] = searches.default_warm_start(learning.get("warm_start"), settings.samples, described)
    return Hyperparameters(**learning)


def _seq2seq(settings: TrainSettings, run_dir: Path, report: Report, *, plan: RewardPlan, hp: Hyperparameters,
             polish: float) -> TrainOutcome:
    """The seq2seq learner's run in the locked `run_dir`, with the reward plan, hyperparameters and
    polish share `_check_seq2seq` worked out: what it starts from (kept in the folder as each part
    is known, read back on resume), the learner, the polish, the closing comparison."""
    from placer.costmodel.simulator import SimulatedMeasurer
    from placer.costmodel.training_costs import TrainingStepCosts
    from placer.evaluate.single_device import adopt_best_single
    from placer.graph.grouping import group_graph
    from placer.measure.measurer import MeasureProtocol, measurer_for
    from placer.placers import caps_from_devices
    from placer.placers.local_search import SearchInterrupted
    from placer.policy.budget import LOCAL_SEARCH, POLISH, REINFORCE
    from placer.policy.checkpoint import FILENAME as CHECKPOINT, save_summary
    from placer.policy.run_start import RunStart
    from placer.policy.search_warm_start import reinforce_share, search_warm_start
    from placer.policy.trainer import train as learn
    from placer.policy.warm_start import plan_warm_start
    from placer.workers.launch import finish_pool, start_pool

    hardware, step = settings.hardware, settings.step
    described = hardware.simulated_only   # a cluster this machine is not: every figure simulated
    graph = settings.model.graph_only(weights=hardware.weights)
    devices = hardware.device_list()
    training = step.training_spec(graph)
    pipeline = step.pipeline()   # --micro-batches: every step, real or simulated, is pipelined
    protocol = MeasureProtocol(settings.warmup, settings.repeats, settings.timeout, objective=step.objective)
    # from here on the folder is a run: what it starts from is kept there as it becomes known
    identity = {"graph_sha256": graph.sha256, "devices": [d.name for d in devices], "groups": settings.groups,
                "grouping": settings.grouping, "warm_start": hp.warm_start, "seed": settings.seed,
                "costs": hardware.described.name if described else settings.cost_model, "engine": step.engine,
                "objective": {"objective": step.objective, **(training.to_dict() if training is not None else {})},
                "pipeline": [pipeline.micro_batches, pipeline.schedule] if pipeline.pipelined else None}
    start = RunStart.resume(run_dir, identity, graph) if settings.resume else RunStart.begin(run_dir, identity)
    if described:
        from placer.costmodel.roofline import RooflineCostModel, cluster_measurer

        cost = RooflineCostModel(hardware.described, graph)
        # the closing confirmation too is simulated, on the cluster's costs; the cluster named in its
        # protocol is part of the run's identity (resume refuses another)
        confirm = cluster_measurer(hardware.described, graph, cost, training=training, pipeline=pipeline)
    else:
        # Real measurement, for the rewards unless they are simulated, and in every mode for the
        # side-by-side confirmation at the end: the reported figures are real measurements.
        confirm = measurer_for(step.engine, graph, devices, protocol, seed=settings.seed, training=training,
                               pipeline=pipeline)
        # The cost model serves the warm start, the closing comparison and, unless the reward is real, the samples.
        cost = _cost_model(settings, graph, devices, confirm, start, report)
    # Real rewards are paired: each batch in interleaved rounds with the best single device
    profiled = getattr(getattr(cost, "profile", None), "step_times", {}) or {}
    measurer = paired_rewards(graph, confirm, profiled, run_dir, settings.warmup, settings.repeats, settings.seed) \
        if plan.reward != "simulated" else None
    pool = start_pool(settings.workers, settings.ray_address, graph, devices, protocol, settings.seed, training,
                      step.engine, report)   # --workers: many placements measured at once
    measurer = pool if pool is not None else measurer
    simulator = None if plan.reward == "real" else confirm if described else \
        SimulatedMeasurer(graph, devices, cost, training=training, pipeline=pipeline)
    warm = searched = None
    budget = start.budget(settings.samples, polish)   # what every phase drew, kept in the run folder
    # set aside before local search and the learner draw; a search here measures its finalists too
    plan_phase.reserve(budget, searches_plans(settings), least=1 if described else least_samples())
    names, caps = [d.name for d in devices], caps_from_devices(devices)
    # the baselines it starts from see a training step's costs per node on the training objective
    # (and the polish's moves too: built once for both)
    needed = hp.warm_start != "none" or polish
    costs = cost if training is None or not needed else TrainingStepCosts(graph, names, cost, training)
    grouping = start.grouping() or group_graph(graph, settings.groups, len(devices), settings.grouping)
    if hp.warm_start == "local_search":   # local search's own run first; the learner gets what it leaves
        searched = start.searched(settings.samples)
        if searched is None:
            progress = start.search_progress or {"budget": budget.allowance(LOCAL_SEARCH), "state": None}
            try:
                searched = search_warm_start(graph, names, costs, caps, grouping, progress["budget"], settings.samples,
                                             seed=settings.seed, pipeline=pipeline, resume=progress["state"])
            except SearchInterrupted as cut:
                start.keep_search_progress(progress["budget"], cut.state)
                raise
        budget.set_drawn(LOCAL_SEARCH, searched.samples)
        learn_samples, per_update = reinforce_share(budget, start.samples_per_update or hp.samples_per_update,
                                                    len(devices), resumed=start.samples_per_update is not None)
        start.keep_searched(searched, per_update)
        hp = replace(hp, samples_per_update=per_update)
        warm = searched.warm
        report(searches.searched_text(searched, learn_samples, polishing=bool(polish)))
    elif hp.warm_start != "none":
        warm = start.warm()
        if warm is None:
            warm = plan_warm_start(graph, names, costs, caps, grouping, hp.warm_start, seed=settings.seed,
                                   pipeline=pipeline)
            start.keep_warm(warm)
    else:
        start.keep_grouping(grouping)
    if searched is None:
        learn_samples = budget.allowance(REINFORCE)
    start.keep_budget(budget)
    if warm is not None:
        grouping = warm.grouping
        report(f"warm start: the policy first imitates {warm.source} ({warm.simulated_step_time * 1e3:.2f} ms "
               f"simulated), on its {len(grouping)} groups split where {warm.source} cuts them")
    report(f"training a placement of {graph.source} ({len(graph.nodes)} ops in {len(grouping)} groups) "
           f"on {', '.join(str(d) for d in devices)}, {_reward_text(plan)}; run folder {run_dir}")
    result = learn(graph, measurer, grouping, run_dir, hp, samples=learn_samples, budget_s=settings.budget_s,
                   seed=settings.seed, resume=(run_dir / CHECKPOINT).exists(), progress=settings.progress,
                   confirm=confirm, reward=plan.reward, simulator=simulator, real_fraction=plan.real_fraction,
                   warm_start=warm,
                   counts_evaluations=described,   # the searches it is compared with count every simulation
                   run_info={"graph": graph.source, "reward": plan.reward, "objective": step.objective,
                             **({"loss": training.loss.kind, "optimizer": training.optimizer.name}
                                if training is not None else {}),
                             "cost_model": ("roofline" if described else settings.cost_model)
                             if simulator is not None else None,
                             **({"cluster": hardware.described.name, "simulated": True} if described else {}),
                             "engine": step.engine,
                             **({"micro_batches": pipeline.micro_batches, "schedule": pipeline.schedule}
                                if pipeline.pipelined else {}),
                             "warmup": settings.warmup, "repeats": settings.repeats, "timeout": settings.timeout,
                             "workers": settings.workers, "ray_address": settings.ray_address})
    finish_pool(pool, report)
    reinforced, policy_best = result.summary["samples"], result.summary["best_step_time"]
    budget.set_drawn(REINFORCE, reinforced)
    if budget.total is not None and (polish or budget.drawn.get(POLISH)):
        # nothing to polish now after Ctrl-C or where no placement was learned: earlier polishes stay counted
        can_polish = bool(polish) and not result.interrupted and policy_best is not None
        searches.polish(graph, names, costs, caps, pipeline, start, budget, can_polish, settings.seed,
                        result.summary, report)
    if searched is not None:
        searches.finish_searched(searched, result.summary, budget, hp.samples_per_update, policy_best, confirm,
                                 run_dir)
    outcome = TrainOutcome(run_dir, result.summary, result.interrupted, "seq2seq", searched=searched,
                           reinforced=reinforced)
    plan_rows = []
    if searches_plans(settings) and not result.interrupted and result.summary["best_step_time"] is not None:
        if described:
            plan_rows = plan_phase.search_plans(graph, hardware.described, names, run_dir, result.summary, budget,
                                                start, settings.seed, training, pipeline, report)
        else:
            plan_rows = search_plans_here(graph, names, cost, confirm, run_dir, result.summary, budget, start,
                                          settings.seed, report)
    if settings.closing_comparison and not result.interrupted and result.summary["best_step_time"] is not None:
        outcome.comparison = _closing_comparison(settings, graph, devices, cost, run_dir, training, pipeline, report,
                                                 included=plan_rows)
        # one best single device throughout: the comparison's, measured last, names it in the summary too
        adopt_best_single(outcome.summary, outcome.comparison)
        save_summary(run_dir, outcome.summary)
    return outcome


def _reward_text(plan: RewardPlan) -> str:
    if plan.reward == "hybrid":
        return f"reward simulated until the policy converges (at most {1 - plan.real_fraction:.0%} of the budget), then real"
    return f"reward {plan.reward}"


def _cost_model(settings: TrainSettings, graph, devices, real, start, report: Report):
    """The profiled costs on these devices (cached), or the analytic ones. A run learns on its own
    copy of the profile (`start`), read back on resume, never the shared cache again."""
    from placer.costmodel.profiled import ProfiledCostModel
    from placer.costmodel.simulator import AnalyticCostModel

    if settings.cost_model == "analytic":
        return AnalyticCostModel([d.name for d in devices])
    kept = start.profile()
    if kept is not None:
        report(f"profiled costs read from the run's own copy, {start.run_dir / 'profile.json'}")
        return ProfiledCostModel(kept, start.run_dir / "profile.json", from_cache=True)
    from placer.costmodel.profile_cache import profiled_cost_model

    started = time.monotonic()
    costs = profiled_cost_model(graph, devices, refresh=settings.refresh_profile, engine=settings.step.engine,
                                report=report, shortcut="--cost-model analytic skips it",
                                check_cached=True, prepared=real.prepared, training=real.training)
    if costs.from_cache:
        report(f"profiled costs read from {costs.path}")
    else:
        report(f"profiled every op on every device in {time.monotonic() - started:.0f} s; cached in {costs.path}")
    start.keep_profile(costs.profile)
    return costs


def paired_rewards(graph, real, predicted: dict[str, float], run_dir: Path, warmup: int, repeats: int, seed: int):
    """The measurer of real rewards: each batch measured in interleaved rounds together with the
    single device `predicted` (device -> predicted step time) finds fastest (the first one it does
    not predict), its figures paired ratios to that device times the run's anchor (`PairedMeasurer`)."""
    from placer.measure.paired_measurer import PairedMeasurer
    from placer.measure.rounds import RoundsProtocol
    from placer.placement import Placement

    device = min(real.devices, key=lambda d: (predicted.get(d) is None, predicted.get(d) or 0.0))
    reference = Placement.single_device(list(graph.nodes), device, graph.sha256)
    least = max(6, repeats)   # a 95% interval needs 6 rounds
    rounds = RoundsProtocol(warmup=warmup, min_rounds=least, max_rounds=2 * least, max_seconds=120.0,
                            precision=0.05, seed=seed)
    return PairedMeasurer(real, reference, rounds, anchor_file=run_dir / "paired_anchor.json")


def _closing_comparison(settings: TrainSettings, graph, devices, cost, run_dir: Path, training, pipeline,
                        report: Report, included=()):
    """Every baseline placer, random search with the run's samples, and the run's placements,
    measured side by side now: the figures that say whether learning beat the heuristics. Measured
    as `placer compare --include-rl` measures with no rounds options: in its blocks (`BLOCKS`), so
    that the intervals and verdicts hold the variation between runs, as compare's do. Written to
    the run folder's compare/. The `included` rows (the plan phase's) are shown too."""
    from placer.jobs.compare import BLOCKS, comparison_for_run, simulated_comparison
    from placer.evaluate.report import write_outputs
    from placer.measure.rounds import RoundsProtocol
    from placer.placers import PLACERS

    if settings.hardware.simulated_only:
        report("simulating every baseline placer and the learned placements side by side ...")
        comparison = simulated_comparison(graph, devices, settings.hardware.described, list(PLACERS), run_dir, None,
                                          settings.seed, training=training, pipeline=pipeline, included=included)
    else:
        report("measuring every baseline placer and the learned placements side by side ...")
        comparison = comparison_for_run(graph, devices, cost, run_dir,
                                        RoundsProtocol(seed=settings.seed, blocks=BLOCKS), seed=settings.seed,
                                        timeout=settings.timeout, training=training, pipeline=pipeline,
                                        engine=settings.step.engine, progress=report, included=included)
    write_outputs(comparison, run_dir / "compare", plot=False)   # its whole table too (TABLE)
    return comparison


# --- the graph policy, fine-tuned ---

def policy_path(value: str) -> Path:
    """The checkpoint `policy` names: the shipped one for `pretrained`, else a policy.pt file."""
    from placer.policy.gnn.checkpoint import PRETRAINED

    if value == "pretrained":
        return PRETRAINED
    if not value.endswith(".pt"):
        raise PlacerError(f"--policy takes seq2seq, pretrained or a graph policy file (policy.pt), not {value!r}")
    return Path(value)


def _check_graph_policy(settings: TrainSettings):
    """The graph policy's settings checked before any work; the function that runs it."""
    policy_path(settings.policy)
    reward = settings.reward or "simulated"   # its default: it was pre-trained on the simulator
    if settings.learning:
        given = ", ".join("--" + name.replace("_", "-") for name in sorted(settings.learning))
        raise PlacerError(f"{given}: the seq2seq learner's options, which the graph policy does not read; drop "
                          "them, or use --policy seq2seq")
    if settings.space == "plans":
        raise PlacerError("--space plans: the graph policy places whole ops; drop --space, or use --policy seq2seq "
                          "(its run on a --cluster ends with a search over plans)")
    if not settings.hardware.cluster:
        raise PlacerError("the graph policy reads the devices from a described cluster: add --cluster NAME|FILE "
                          "(placer cluster describe-local describes this machine, for --reward real), or use "
                          "--policy seq2seq")
    if reward == "hybrid":
        raise PlacerError("--policy pretrained fine-tunes with --reward simulated (its default) or real; hybrid is "
                          "the seq2seq learner's (--policy seq2seq)")
    if settings.workers or settings.step.objective != "inference" or settings.step.micro_batches != 1:
        raise PlacerError("--policy pretrained fine-tunes on inference steps, one placement at a time; drop "
                          "--workers, --objective training and --micro-batches, or use --policy seq2seq")
    if reward == "real":
        settings.hardware.refuse_real("--reward real")   # the same refusal as seq2seq's, on hardware this machine is not
        settings.step.check_engine()
    polish_share(settings.polish, settings.samples, reward == "simulated", GRAPH_POLICY_POLISH)
    return _graph_policy


def _graph_policy(settings: TrainSettings, run_dir: Path, report: Report) -> TrainOutcome:
    """Fine-tune the policy checkpoint on the model and cluster, rewards simulated or (reward real,
    the cluster being this machine) measured, for the samples or seconds given in all."""
    from placer.policy.gnn.checkpoint import load_policy
    from placer.policy.gnn.episode import make_episode
    from placer.policy.gnn.finetune import finetune, start_chains
    from placer.policy.gnn.learn import LearnConfig
    from placer.policy.gnn.rewards import MeasuredRewards, SimulatedRewards

    reward = settings.reward or "simulated"
    path = policy_path(settings.policy)
    policy, info = load_policy(path)
    graph = settings.model.graph_only(weights="shapes" if reward == "simulated" else "load")
    cluster = settings.hardware.described
    episode = make_episode(graph, cluster, name=f"{graph.source}@{cluster.name}")
    rewards = MeasuredRewards(episode, _measured(settings, graph, episode, run_dir)) if reward == "real" \
        else SimulatedRewards(episode)
    report(f"fine-tuning the graph policy ({settings.policy}) on {graph.source} ({len(graph.nodes)} ops in "
           f"{episode.features.n_groups} groups) on {cluster.name}, rewards {rewards.figures}; run folder {run_dir}")
    # what a resume must find again: another graph, cluster, policy file or reward is another run
    identity = {"graph_sha256": graph.sha256, "cluster": cluster.name,
                "cluster_sha256": _digest(json.dumps(cluster.to_dict(), sort_keys=True).encode()),
                "policy_sha256": _digest(path.read_bytes())}
    result = finetune(policy, episode, run_dir, LearnConfig(), rewards=rewards, samples=settings.samples,
                      budget_s=settings.budget_s, seed=settings.seed, resume=settings.resume, identity=identity,
                      chains=start_chains(settings.samples, policy.config.rounds, rewards.reward, SAMPLED_CHAINS),
                      polish=polish_share(settings.polish, settings.samples, rewards.reward == "simulated",
                                          GRAPH_POLICY_POLISH),
                      run_info={"graph": graph.source, "cluster": cluster.name, "policy": str(path),
                                "pretrained_info": {k: info[k] for k in ("corpus", "command") if k in info}},
                      log=report)
    return TrainOutcome(run_dir, result.summary, result.interrupted, "graph policy", figures=rewards.figures)


def _measured(settings: TrainSettings, graph, episode, run_dir: Path):
    """Real rewards as seq2seq measures them: on the cluster's devices (its memory as caps), each
    batch in interleaved rounds beside the single device the cluster's description finds fastest
    (`paired_rewards`)."""
    import numpy as np

    from placer.measure.measurer import MeasureProtocol, measurer_for

    real = measurer_for(settings.step.engine, graph, settings.hardware.device_list(),
                        MeasureProtocol(settings.warmup, settings.repeats, settings.timeout), seed=settings.seed)
    names, groups = episode.cluster.device_names, episode.features.n_groups
    single = episode.step_times(np.repeat(np.arange(len(names))[:, None], groups, axis=1))   # inf: does not fit
    return paired_rewards(graph, real, dict(zip(names, single.tolist())), run_dir, settings.warmup, settings.repeats,
                          settings.seed)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]
