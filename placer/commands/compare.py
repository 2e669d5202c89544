"""`placer compare`: every baseline placer, and optionally a learned placement, measured side by
side on the real devices in one run. The comparison itself is `placer.evaluate.compare`; here are
the arguments, what a training run's folder holds, and where the results go (`placer.evaluate.report`)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from placer.commands.common import (add_devices_arg, cluster_from_args, simulated_only, add_engine_arg, add_graph_args, add_objective_args,
                                   add_pipeline_args, add_rounds_args, check_engine_args, check_writable,
                                   devices_from_args, ignored_on_cluster, load_graph_from_args, pipeline_from_args,
                                   refuse_ignored_on_cluster, rounds_from_args, training_spec_from_args)
from placer.errors import PlacerError

DEFAULT_SAMPLES = 1000   # random_search's samples when no training run says how many the learner drew
# Blocks of rounds, every row built afresh in each: three let a block that moved (as a run does)
# show in the interval, at the cost of two more builds and warm-ups of every row.
BLOCKS = 3

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    """Add the `compare` sub-command."""
    from placer.placers import PLACERS

    parser = subparsers.add_parser(
        "compare", help="measure every baseline placer (and a learned placement) side by side",
        description="Profile the graph on the devices (cached), run every baseline placer, measure each "
                    "placement for real in interleaved rounds (every round runs every placement once, shuffled), "
                    "in --blocks blocks (every placement built afresh in each, so that the intervals hold the "
                    "variation between runs), and print each step time with its 95% interval, the paired speedup "
                    "over the best single device and over the whole machine as one device, each row's verdict "
                    "against the fastest (faster or slower only when the whole interval clears 2%, tied when it "
                    "lies within, else not resolved), the ratio to the lower bound, peak memory and the time each "
                    "placer took; rows that moved outside their interval of the previous run are noted. A "
                    "control row measures the best single device twice; ONNX Runtime on the whole model is a "
                    "row too. "
                    "Saves compare.csv, compare.json and a bar chart compare.png (matplotlib) in --out; "
                    "--json prints what compare.json holds instead of the table.")
    add_graph_args(parser)
    add_devices_arg(parser)
    add_objective_args(parser)
    add_engine_arg(parser)
    add_pipeline_args(parser)
    parser.add_argument("--include-rl", metavar="runs/NAME", default=None,
                        help="also measure the best placement of a training run (its placement.json)")
    parser.add_argument("--include-placement", metavar="FILE", action="append", default=[],
                        help="also measure (or simulate, with --cluster) this placement file beside the baselines, "
                             "e.g. one placer place wrote; repeatable. A file for another graph, other devices or "
                             "another cluster is refused")
    parser.add_argument("--placers", default=",".join(PLACERS), metavar="P1,P2",
                        help=f"which placers to run (default: all: {','.join(PLACERS)})")
    parser.add_argument("--samples", type=int, default=None, metavar="N",
                        help="random placements random_search simulates (default: the learner's sample count "
                             f"from the --include-rl run's summary.json, else {DEFAULT_SAMPLES})")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="where to save the table and chart (default: runs/compare-<graph name>)")
    add_rounds_args(parser, blocks=BLOCKS)
    parser.add_argument("--history-dir", default=None, metavar="DIR",
                        help="where compare keeps the history of its runs, a file per graph and device set, to widen "
                             "each step-time interval by the spread between recent runs and say which rows moved "
                             "outside their interval of the previous run (default: compare_history "
                             "beside the profile cache, $PLACER_CACHE or ~/.cache/placer)")
    parser.add_argument("--no-history", action="store_true",
                        help="neither read nor append to the history of compare's runs")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one step may take before it fails")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random placer and of the inputs")
    parser.add_argument("--refresh-profile", action="store_true",
                        help="profile the graph again even if a cached profile exists")
    parser.add_argument("--no-plot", action="store_true", help="do not draw compare.png")
    parser.add_argument("--json", action="store_true",
                        help="print the comparison as JSON (what compare.json holds) instead of the table")
    ignored_on_cluster(parser, "--engine", "--warmup", "--min-rounds", "--max-rounds", "--max-seconds", "--precision",
                       "--blocks", "--history-dir", "--no-history", "--timeout", "--refresh-profile")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Profile, place, measure, print the table and save it."""
    from placer.evaluate.report import comparison_json, format_table, write_outputs
    from placer.measure.measurer import MeasureProtocol
    from placer.costmodel.profile_cache import profiled_cost_model
    from placer.evaluate.compare import check_placer_names
    from placer.evaluate.history import check_and_record, default_history_dir

    placers = [p.strip() for p in args.placers.split(",") if p.strip()]
    check_placer_names(placers)
    check_engine_args(args)
    refuse_ignored_on_cluster(args)
    if args.include_rl:
        check_run_hardware(args, args.include_rl)
    if args.samples is not None and args.samples < 1:
        raise PlacerError("--samples must be at least 1")
    out = check_writable(args.out or Path("runs") / f"compare-{Path(args.graph).stem}", "--out", folder=True)
    history = None if args.no_history else check_writable(args.history_dir or default_history_dir(),
                                                           "--history-dir", folder=True)
    graph = load_graph_from_args(args)
    devices = devices_from_args(args)
    # checked before any profiling or placing: a wrong file costs nothing
    included = included_rows(graph, args.include_placement, [d.name for d in devices],
                             cluster_from_args(args).name if simulated_only(args) else None)
    protocol = MeasureProtocol(warmup=0, repeats=1, timeout_s=args.timeout, objective=args.objective)
    rounds = rounds_from_args(args, args.seed)
    training = training_spec_from_args(args, graph)

    if simulated_only(args):
        comparison = simulated_comparison(graph, devices, cluster_from_args(args), placers, args.include_rl,
                                          args.samples, args.seed, training=training,
                                          pipeline=pipeline_from_args(args), included=included)
        print(comparison_json(comparison) if args.json else format_table(comparison), end="" if args.json else "\n")
        paths = write_outputs(comparison, out, plot=not args.no_plot)
        print(f"saved {', '.join(str(p) for p in paths)}", file=sys.stderr if args.json else sys.stdout)
        return 0
    start = time.perf_counter()
    cost = profiled_cost_model(graph, devices, refresh=args.refresh_profile, training=training,
                                       engine=args.engine, check_cached=True)
    profile_s = time.perf_counter() - start
    print(f"profile: {'cached' if cost.from_cache else f'measured in {profile_s:.1f} s'} ({cost.path})",
          file=sys.stderr)

    comparison = _measure_side_by_side(graph, devices, cost, placers, args.include_rl, args.samples, args.seed,
                                       protocol, rounds, progress=lambda text: print(text, file=sys.stderr),
                                       training=training, engine=args.engine, pipeline=pipeline_from_args(args),
                                       included=included)
    if history is not None:
        comparison.notes += check_and_record(comparison, history)

    print(comparison_json(comparison) if args.json else format_table(comparison), end="" if args.json else "\n")
    _warn_if_profile_drifted(comparison, cost)
    paths = write_outputs(comparison, out, plot=not args.no_plot)
    print(f"saved {', '.join(str(p) for p in paths)}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _measure_side_by_side(graph, devices, cost, placers: list[str], run_dir, samples: int | None, seed: int,
                          protocol, rounds, progress=None, training=None, engine: str = "torch", pipeline=None,
                          included=()):
    """Run the placers (and add the run's placements and what a user runs instead: the whole machine
    as one device, ONNX Runtime), then measure them all in the same interleaved rounds in `engine`;
    with `training` (the protocol's objective is then training) every placement on the training
    step, with `pipeline` on the pipelined step."""
    from placer.placers import caps_from_devices
    from placer.measure.measurer import measurer_for
    from placer.evaluate.compare import baseline_rows, compare
    from placer.evaluate.user_baselines import user_baseline_rows

    names = [d.name for d in devices]
    caps = caps_from_devices(devices)
    options = {"random_search": {**_random_search_options(graph, names, run_dir, samples), "pipeline": pipeline}}
    rows = baseline_rows(graph, names, cost, caps, placers, seed=seed, options=options, training=training)
    if run_dir:
        rows.extend(learned_rows(graph, run_dir, names))
    rows.extend(included)
    users, skipped = user_baseline_rows(graph, devices, protocol, seed, training, engine, pipeline)
    measurer = measurer_for(engine, graph, devices, protocol, seed=seed, training=training, pipeline=pipeline)
    comparison = compare(graph, names, measurer, cost, rows + users, caps, progress=progress, training=training,
                         rounds=rounds, pipeline=pipeline)
    comparison.notes += skipped
    comparison.info = {"profile": str(getattr(cost, "path", None)), "profile_cached": getattr(cost, "from_cache", None),
                       "protocol": measurer.protocol_record(), "devices": [str(d) for d in devices],
                       "engine": engine}
    return comparison


def simulated_comparison(graph, devices, cluster, placers: list[str], run_dir, samples: int | None, seed: int,
                         training=None, pipeline=None, included=()):
    """Every placer (and the run's placements, and the `included` rows) on a described cluster, each row's step time simulated
    with the cluster's roofline costs: nothing is measured, so nothing is noisy or tied."""
    from placer.costmodel.roofline import RooflineCostModel
    from placer.costmodel.simulator import SimulatedMeasurer
    from placer.evaluate.compare import baseline_rows, compare
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
    measurer = SimulatedMeasurer(graph, devices, cost, training=training, pipeline=pipeline)
    comparison = compare(graph, names, measurer, cost, rows, caps, training=training, pipeline=pipeline)
    comparison.info = {"simulated": True, "cluster": cluster.name, **cost.describe(),
                       "devices": [str(d) for d in devices]}
    comparison.notes.insert(0, f"simulated: every step time is the roofline cost model's on cluster {cluster.name!r} "
                               "(its devices' and links' datasheet figures); nothing was measured")
    return comparison


def comparison_for_run(graph, devices, cost, run_dir, rounds, *, seed: int = 0, timeout: float = 60.0,
                       training=None, progress=None, engine: str = "torch", pipeline=None):
    """What `placer compare --include-rl RUN` measures: every placer, random search with the run's
    samples and groups, the run's placements, the whole machine and ONNX Runtime, side by side in
    interleaved `rounds` (on the training step with `training`)."""
    from placer.measure.measurer import MeasureProtocol
    from placer.placers import PLACERS

    objective = "inference" if training is None else "training"
    return _measure_side_by_side(graph, devices, cost, list(PLACERS), run_dir, None, seed,
                                 MeasureProtocol(warmup=0, repeats=1, timeout_s=timeout, objective=objective),
                                 rounds, progress=progress, training=training, engine=engine, pipeline=pipeline)


def _random_search_options(graph, names: list[str], run_dir, samples: int | None) -> dict:
    """random_search searches the learner's space with the learner's sample count: the groups and
    samples of the --include-rl run (its summary.json); --samples sets the count instead."""
    from placer.graph.grouping import METHODS, Grouping, group_graph

    summary = run_summary(run_dir) if run_dir else {}
    options = {"samples": samples or summary.get("samples") or DEFAULT_SAMPLES}
    method = summary.get("grouping", "partition")
    if summary.get("group_members") and set(n for g in summary["group_members"] for n in g) == set(graph.nodes):
        groups = summary["group_members"]
        options["grouping"] = Grouping(groups, {n: i for i, g in enumerate(groups) for n in g}, method)
    elif summary.get("groups") and method in METHODS:
        options["grouping"] = group_graph(graph, summary["groups"], len(names), method)
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
    summary = run_summary(run_dir)
    return [learned_row(graph, Placement.load(path), devices, name=name, find_time_s=summary.get("wall_time_s"),
                        samples=summary.get("samples"), check_devices=check_devices)
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


def check_run_hardware(args: argparse.Namespace, run_dir) -> None:
    """A `PlacerError` in one line naming both when the run in `run_dir` was trained for other
    hardware than the comparison's: another cluster, a cluster and this machine, or the reverse.
    A bare placement file (no summary.json beside it) says nothing of its hardware and passes."""
    summary = run_summary(run_dir)
    if not summary:
        return
    protocols = [(summary.get(k) or {}).get("protocol") or {} for k in ("measurer", "simulator")]
    trained = next((p["cluster"] for p in protocols if isinstance(p, dict) and p.get("cluster")), None)
    here = cluster_from_args(args).name if simulated_only(args) else None
    if trained == here:
        return
    run = f"--include-rl {run_dir}"
    retrain = f", or train for it (placer train --cluster {args.cluster} --reward simulated)" if here else ""
    if trained is None:
        raise PlacerError(f"{run} was trained on this machine's devices ({', '.join(summary.get('devices', []))}), "
                          f"not for cluster {here!r}; compare it without --cluster{retrain}")
    raise PlacerError(f"{run} was trained for cluster {trained!r}, not "
                      f"{f'for cluster {here!r}' if here else 'on this machine'}; compare it with --cluster "
                      f"{trained}{retrain}")


def run_summary(run_dir) -> dict[str, Any]:
    """A training run's summary.json (next to its placement.json), or {} when absent or unreadable."""
    run_dir = Path(run_dir)
    path = (run_dir if run_dir.is_dir() else run_dir.parent) / "summary.json"
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        log.warning("could not read %s; the learned placement's search time and samples are unknown", path)
        return {}


def _warn_if_profile_drifted(comparison, cost) -> None:
    """The lower bound and predictions come from the profile: say so when the machine now runs
    the graph at a clearly different speed than when it was profiled."""
    for row in comparison.rows:
        device = row.name.removeprefix("single:")
        profiled = row.predicted_step_time   # what the (calibrated) simulator predicts for the device alone
        if row.placer == "single" and row.step_time and profiled and not 0.8 < row.step_time / profiled < 1.25:
            print(f"note: {device} ran the whole graph in {row.step_time * 1e3:.1f} ms now but the profile "
                  f"predicts {profiled * 1e3:.1f} ms{' (cached profile)' if getattr(cost, 'from_cache', False) else ''}; "
                  "the lower bound and predictions assume the profiled speed (--refresh-profile measures again)",
                  file=sys.stderr)
