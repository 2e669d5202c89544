"""`placer compare` as a library call: every baseline placer, and optionally a training run's
placements and placement files, measured side by side on the real devices in one run, or simulated
on a described cluster. The comparison itself is `placer.evaluate.compare`; here are the settings,
what a training run's folder holds, and where the results go (`placer.evaluate.report`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from placer.errors import PlacerError
from placer.jobs.settings import HardwareSettings, ModelSettings, StepSettings, check_seed
from placer.measure.rounds import RoundsProtocol
from placer.placers import PLACERS
from placer.policy.summary_file import RunSummary

if TYPE_CHECKING:
    from placer.evaluate.compare import Comparison

# The plans a simulated comparison prices by default: what users run, then placer's search from the
# best of them; FlexFlow's MCMC and REINFORCE over plans are the benchmarks' (--plans adds them: each
# budget adds the search's time again)
DEFAULT_PLANS = ("data_parallel", "fsdp", "tensor_parallel", "pipeline_data", "data_parallel_by_speed", "plan_search")
ALL_PLANS = (*DEFAULT_PLANS, "mcmc", "plan_exact", "plan_reinforce")
# Those run for real beside the placements on this machine's devices by default
MEASURED_DEFAULT = ("data_parallel", "tensor_parallel", "plan_search")
DEFAULT_SAMPLES = 1000   # random_search's samples when no training run says how many the learner drew
# Blocks of rounds, every row built afresh in each: three let a block that moved (as a run does)
# show in the interval, at the cost of two more builds and warm-ups of every row.
BLOCKS = 3

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompareSettings:
    """What to compare and how to measure it; every default is `placer compare`'s."""

    model: ModelSettings
    hardware: HardwareSettings = HardwareSettings()
    step: StepSettings = StepSettings()
    placers: tuple[str, ...] = tuple(PLACERS)
    include_rl: str | None = None             # a training run's folder (runs/NAME) or its placement file
    include_placement: tuple[str, ...] = ()   # placement files compared beside the baselines
    samples: int | None = None                # random_search's; None: the include_rl run's, else DEFAULT_SAMPLES
    seed: int = 0                             # of the random placers and of the inputs
    rounds: RoundsProtocol = RoundsProtocol(blocks=BLOCKS)   # its own seed orders the rounds
    timeout_s: float = 60.0                   # one step slower than this fails
    refresh_profile: bool = False             # profile the graph again even when a cached profile exists
    out: str | None = None                    # None: runs/compare-<graph name>
    history: bool = True                      # read and append to the history of compare's runs
    history_dir: str | None = None            # None: `placer.evaluate.history.default_history_dir`
    plot: bool = True                         # draw compare.png
    # plans beside the placements (`placer.evaluate.plan_rows.PLANS`): simulated on a described cluster,
    # run on this machine's devices; None: DEFAULT_PLANS there, MEASURED_DEFAULT here (where plans run)
    plans: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check_seed(self.seed)   # as every job's settings: a script's seed too, not only the CLI's

    @property
    def out_dir(self) -> Path:
        """Where compare.json, compare.csv and compare.png go."""
        return Path(self.out) if self.out else Path("runs") / f"compare-{Path(self.model.graph).stem}"

    @property
    def history_folder(self) -> Path | None:
        """Where the history of compare's runs is kept, or None when it is not."""
        from placer.evaluate.history import default_history_dir

        return Path(self.history_dir or default_history_dir()) if self.history else None


@dataclass
class CompareResult:
    """The comparison, the files it was saved in, and the single devices that ran clearly apart
    from their profile (one line each)."""

    comparison: Comparison
    saved: list[Path]
    profile_drift: list[str] = field(default_factory=list)


def compare(settings: CompareSettings, report: Callable[[str], None] = log.info) -> CompareResult:
    """Profile (cached), place with every placer, measure every row side by side (simulate it on a
    described cluster) and save the comparison in `settings.out_dir`; `report` gets the progress."""
    from placer.costmodel.profile_cache import profiled_cost_model
    from placer.evaluate.compare import check_placer_names, profile_drift_notes
    from placer.evaluate.history import check_and_record
    from placer.evaluate.report import write_outputs
    from placer.measure.measurer import MeasureProtocol

    check_placer_names(list(settings.placers))
    settings.step.check_engine()
    hardware = settings.hardware
    unknown = [p for p in settings.plans or () if p not in ALL_PLANS]
    if unknown:
        raise PlacerError(f"unknown plan {unknown[0]!r} in --plans; choose from {', '.join(ALL_PLANS)}, or none")
    if settings.include_rl:
        check_run_hardware(hardware, settings.include_rl)
    if settings.samples is not None and settings.samples < 1:
        raise PlacerError("--samples must be at least 1")
    graph = settings.model.graph_only(weights=hardware.weights)
    devices = hardware.device_list()
    # checked before any profiling or placing: a wrong file costs nothing
    included = included_rows(graph, settings.include_placement, [d.name for d in devices],
                             hardware.described.name if hardware.simulated_only else None)
    protocol = MeasureProtocol(warmup=0, repeats=1, timeout_s=settings.timeout_s, objective=settings.step.objective)
    training = settings.step.training_spec(graph)
    pipeline = settings.step.pipeline()
    placers = list(settings.placers)

    if hardware.simulated_only:
        comparison = simulated_comparison(graph, devices, hardware.described, placers, settings.include_rl,
                                          settings.samples, settings.seed, training=training, pipeline=pipeline,
                                          included=included,
                                          plans=DEFAULT_PLANS if settings.plans is None else settings.plans)
        return CompareResult(comparison, write_outputs(comparison, settings.out_dir, plot=settings.plot))
    start = time.perf_counter()
    cost = profiled_cost_model(graph, devices, refresh=settings.refresh_profile, training=training,
                               engine=settings.step.engine, check_cached=True, report=report)
    profile_s = time.perf_counter() - start
    report(f"profile: {'cached' if cost.from_cache else f'measured in {profile_s:.1f} s'} ({cost.path})")

    comparison = _measure_side_by_side(graph, devices, cost, placers, settings.include_rl, settings.samples,
                                       settings.seed, protocol, settings.rounds, progress=report, training=training,
                                       engine=settings.step.engine, pipeline=pipeline, included=included,
                                       shortcut="--max-seconds or --blocks 1 shortens them",
                                       plans=_measured_plans(settings, pipeline))
    if settings.history_folder is not None:
        comparison.notes += check_and_record(comparison, settings.history_folder)
    return CompareResult(comparison, write_outputs(comparison, settings.out_dir, plot=settings.plot),
                         profile_drift_notes(comparison, cost.from_cache))


def _measured_plans(settings: CompareSettings, pipeline) -> tuple[str, ...]:
    """The plans run beside the placements on this machine's devices: those asked for, else what
    runs here (`MEASURED_DEFAULT`) where plans run (one step, not micro-batches)."""
    if settings.plans is not None:
        return settings.plans
    return () if pipeline is not None and pipeline.pipelined else MEASURED_DEFAULT


def _measure_side_by_side(graph, devices, cost, placers: list[str], run_dir, samples: int | None, seed: int,
                          protocol, rounds, progress=None, training=None, engine: str = "torch", pipeline=None,
                          included=(), shortcut: str = "", plans=()):
    """Run the placers (and add the run's placements, what a user runs instead: the whole machine
    as one device, ONNX Runtime, and the `plans` that split ops over the same devices), then
    measure them all in the same interleaved rounds in `engine`;
    with `training` (the protocol's objective is then training) every placement on the training
    step, with `pipeline` on the pipelined step. `progress` hears what it does (`shortcut`: the
    option that shortens the rounds)."""
    from placer.placers import caps_from_devices
    from placer.measure.measurer import measurer_for
    from placer.evaluate.compare import baseline_rows, compare as compare_rows
    from placer.evaluate.plan_rows import measured_plan_rows
    from placer.evaluate.user_baselines import user_baseline_rows

    names = [d.name for d in devices]
    caps = caps_from_devices(devices)
    options = {"random_search": {**_random_search_options(graph, names, run_dir, samples), "pipeline": pipeline}}
    searching = [p for p in ("random_search", "local_search") if p in placers]
    if progress is not None:
        progress(f"placing with {len(placers)} placers" + (f" ({', '.join(searching)}: {options['random_search']['samples']}"
                 " simulated placements each; --samples sets how many)" if searching else ""))
    rows = baseline_rows(graph, names, cost, caps, placers, seed=seed, options=options, training=training)
    if run_dir:
        rows.extend(learned_rows(graph, run_dir, names))
    rows.extend(included)
    users, skipped = user_baseline_rows(graph, devices, protocol, seed, training, engine, pipeline)
    measurer = measurer_for(engine, graph, devices, protocol, seed=seed, training=training, pipeline=pipeline)
    planned, not_planned = measured_plan_rows(graph, names, plans, measurer, cost, samples=samples, seed=seed,
                                              placements={r.name: r.placement for r in rows if r.placement is not None})
    comparison = compare_rows(graph, names, measurer, cost, rows + users + planned, caps, progress=progress,
                              training=training, rounds=rounds, pipeline=pipeline, shortcut=shortcut)
    comparison.notes += skipped + not_planned
    comparison.info = {"profile": str(getattr(cost, "path", None)), "profile_cached": getattr(cost, "from_cache", None),
                       "protocol": measurer.protocol_record(), "devices": [str(d) for d in devices],
                       "engine": engine}
    return comparison


def plan_searches() -> dict:
    """Every search over plans by name: the evaluate layer's, and REINFORCE's from the policy layer."""
    from placer.evaluate.plan_search_rows import SEARCHES
    from placer.policy.plan_reinforce import NAME, plan_reinforce

    return {**SEARCHES, NAME: plan_reinforce}


def simulated_comparison(graph, devices, cluster, placers: list[str], run_dir, samples: int | None, seed: int,
                         training=None, pipeline=None, included=(), plans=()):
    """Every placer (and the run's placements, the `included` rows and the `plans`) on a described cluster, each row's step time simulated
    with the cluster's roofline costs: nothing is measured, so nothing is noisy or tied."""
    from placer.costmodel.roofline import RooflineCostModel
    from placer.costmodel.simulator import SimulatedMeasurer
    from placer.evaluate.compare import baseline_rows, compare as compare_rows
    from placer.evaluate.plan_rows import plan_rows
    from placer.placers import caps_from_devices

    names = [d.name for d in devices]
    caps = caps_from_devices(devices)
    cost = RooflineCostModel(cluster, graph)
    # the searches get the learner's sample count (local search random search's: `SAME_BUDGET`)
    options = {"random_search": {**_random_search_options(graph, names, run_dir, samples), "pipeline": pipeline}}
    rows = baseline_rows(graph, names, cost, caps, placers, seed=seed, options=options, training=training)
    if run_dir:   # its devices are the cluster's, not this machine's
        rows.extend(learned_rows(graph, run_dir, names, check_devices=False))
    rows.extend(included)
    # the plan searches start from every placement above (and the plans users run): never slower than them
    planned, not_planned = plan_rows(graph, cluster, names, plans, training=training, pipeline=pipeline,
                                     placements={r.name: r.placement for r in rows if r.placement is not None},
                                     samples=samples, seed=seed, searches=plan_searches())
    measurer = SimulatedMeasurer(graph, devices, cost, training=training, pipeline=pipeline)
    comparison = compare_rows(graph, names, measurer, cost, rows + planned, caps, training=training, pipeline=pipeline)
    comparison.notes += not_planned
    comparison.info = {"simulated": True, "cluster": cluster.name, **cost.describe(),
                       "devices": [str(d) for d in devices]}
    comparison.notes.insert(0, f"simulated: every step time is the roofline cost model's on cluster {cluster.name!r} "
                               "(its devices' and links' datasheet figures); nothing was measured")
    return comparison


def comparison_for_run(graph, devices, cost, run_dir, rounds, *, seed: int = 0, timeout: float = 60.0,
                       training=None, progress=None, engine: str = "torch", pipeline=None, included=()):
    """What `placer compare --include-rl RUN` measures: every placer, random search with the run's
    samples and groups, the run's placements, the whole machine and ONNX Runtime, side by side in
    interleaved `rounds` (on the training step with `training`), and the plans that run here
    (`MEASURED_DEFAULT`: placer's plan search among them), and the `included` rows (a run's plan)."""
    from placer.measure.measurer import MeasureProtocol

    objective = "inference" if training is None else "training"
    plans = () if pipeline is not None and pipeline.pipelined else MEASURED_DEFAULT
    return _measure_side_by_side(graph, devices, cost, list(PLACERS), run_dir, None, seed,
                                 MeasureProtocol(warmup=0, repeats=1, timeout_s=timeout, objective=objective),
                                 rounds, progress=progress, training=training, engine=engine, pipeline=pipeline,
                                 shortcut="--no-compare skips them", plans=plans, included=included)


def _random_search_options(graph, names: list[str], run_dir, samples: int | None) -> dict:
    """random_search searches the learner's space with the learner's sample count: the groups and
    samples of the include_rl run (its summary.json); `samples` sets the count instead."""
    from placer.graph.grouping import METHODS, Grouping, group_graph

    summary = RunSummary.read(run_dir) if run_dir else None
    if summary is None:
        return {"samples": samples or DEFAULT_SAMPLES}
    options = {"samples": samples or summary.samples or DEFAULT_SAMPLES}
    method = summary.grouping or "partition"
    groups = summary.group_members
    if groups and set(n for g in groups for n in g) == set(graph.nodes):
        options["grouping"] = Grouping(groups, {n: i for i, g in enumerate(groups) for n in g}, method)
    elif summary.groups and method in METHODS:
        options["grouping"] = group_graph(graph, summary.groups, len(names), method)
    return options


def learned_rows(graph, run_dir, devices: list[str], check_devices: bool = True):
    """The best placement of a training run (`run_dir` is its folder, runs/NAME, or a placement
    file) as the row "learned" and, when the run saved it, the policy's own greedy placement as
    "learned_greedy": the one that shows what the policy learned."""
    from placer.placement import Placement
    from placer.evaluate.compare import learned_row

    run_dir = Path(run_dir)
    files = {"learned": run_dir / "placement.json" if run_dir.is_dir() else run_dir}
    if run_dir.is_dir() and (run_dir / "greedy_placement.json").is_file():
        files["learned_greedy"] = run_dir / "greedy_placement.json"
    summary = RunSummary.read(run_dir)
    return [learned_row(graph, Placement.load(path), devices, name=name,
                        find_time_s=summary.wall_time_s if summary else None,
                        samples=summary.samples if summary else None, check_devices=check_devices)
            for name, path in files.items()]


def included_rows(graph, files, devices: list[str], cluster: str | None):
    """The rows of `compare --include-placement FILE ...`: each file's placement, named
    file:<its stem>, checked against the graph, the compared devices (every device it lists) and
    the hardware it was made for (`placer place` records the cluster); on this machine's devices
    (`cluster` None) against the devices present too. Anything wrong is one `PlacerError` line."""
    from placer.evaluate.compare import INCLUDED, learned_row
    from placer.placement import Placement

    rows, names = [], set()
    here = f"cluster {cluster!r}" if cluster else "this machine's devices"
    for path in files:
        option = f"--include-placement {path}"
        placement = Placement.load(path)
        info = placement.extra.get("placer") if isinstance(placement.extra.get("placer"), dict) else {}
        made_for = info.get("cluster")
        if made_for and made_for != cluster:
            raise PlacerError(f"{option} was made for cluster {made_for!r}, not {here}; compare it with --cluster "
                              f"{made_for}, or place the graph for {here} (placer place)")
        extra = [d for d in placement.devices if d not in devices]
        if extra:
            raise PlacerError(f"{option} is for devices {', '.join(placement.devices)}, and the comparison has no "
                              f"{', '.join(extra)}; compare it on the devices it was made for (--devices or --cluster)")
        name = base = f"file:{Path(path).stem}"
        while name in names:   # two files of one name: the later ones numbered
            name = f"{base}#{len(rows) + 1}"
        names.add(name)
        try:
            rows.append(learned_row(graph, placement, devices, name=name, placer=INCLUDED, what="the placement",
                                    fix="compare it on the devices it was made for (--devices or --cluster)",
                                    find_time_s=info.get("seconds_to_place"), samples=info.get("samples"),
                                    check_devices=cluster is None))
        except PlacerError as exc:
            raise PlacerError(f"{option}: {exc}") from None
    return rows


def check_run_hardware(hardware: HardwareSettings, run_dir) -> None:
    """A `PlacerError` in one line naming both when the run in `run_dir` was trained for other
    hardware than the comparison's: another cluster, a cluster and this machine, or the reverse.
    A bare placement file (no summary.json beside it) says nothing of its hardware and passes."""
    summary = RunSummary.read(run_dir)
    if summary is None:
        return
    protocols = [(record or {}).get("protocol") or {} for record in (summary.measurer, summary.simulator)]
    trained = next((p["cluster"] for p in protocols if isinstance(p, dict) and p.get("cluster")), None)
    here = hardware.described.name if hardware.simulated_only else None
    if trained == here:
        return
    run = f"--include-rl {run_dir}"
    retrain = f", or train for it (placer train --cluster {hardware.cluster} --reward simulated)" if here else ""
    if trained is None:
        raise PlacerError(f"{run} was trained on this machine's devices ({', '.join(summary.devices or [])}), "
                          f"not for cluster {here!r}; compare it without --cluster{retrain}")
    raise PlacerError(f"{run} was trained for cluster {trained!r}, not "
                      f"{f'for cluster {here!r}' if here else 'on this machine'}; compare it with --cluster "
                      f"{trained}{retrain}")
