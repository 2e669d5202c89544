"""`placer compare`: every baseline placer, and optionally a learned placement, measured side by
side on the real devices in one run."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from placer.commands.common import add_devices_arg, add_graph_args, devices_from_args, load_graph_from_args
from placer.errors import PlacerError

DEFAULT_SAMPLES = 1000   # random_search's samples when no training run says how many the learner drew


def register(subparsers) -> None:
    """Add the `compare` sub-command."""
    from placer.placers import PLACERS

    parser = subparsers.add_parser(
        "compare", help="measure every baseline placer (and a learned placement) side by side",
        description="Profile the graph on the devices (cached), run every baseline placer, measure each "
                    "placement for real in one run, and print step time, spread, speedup over the best "
                    "single device, ratio to the lower bound, peak memory and the time each placer took. "
                    "Saves compare.csv, compare.json and a bar chart compare.png (matplotlib) in --out.")
    add_graph_args(parser)
    add_devices_arg(parser)
    parser.add_argument("--include-rl", metavar="runs/NAME", default=None,
                        help="also measure the best placement of a training run (its placement.json)")
    parser.add_argument("--placers", default=",".join(PLACERS), metavar="P1,P2",
                        help=f"which placers to run (default: all: {','.join(PLACERS)})")
    parser.add_argument("--samples", type=int, default=None, metavar="N",
                        help="random placements random_search simulates (default: the learner's sample count "
                             f"from the --include-rl run's summary.json, else {DEFAULT_SAMPLES})")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="where to save the table and chart (default: runs/compare-<graph name>)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs before timing each placement")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per placement (median reported)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one step may take before it fails")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random placer and of the inputs")
    parser.add_argument("--refresh-profile", action="store_true",
                        help="profile the graph again even if a cached profile exists")
    parser.add_argument("--no-plot", action="store_true", help="do not draw compare.png")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Profile, place, measure, print the table and save it."""
    from placer.measure.measurer import MeasureProtocol, RealMeasurer
    from placer.measure.profiled import ProfiledCostModel
    from placer.placers import caps_from_devices
    from placer.placers.compare import (baseline_rows, check_placer_names, compare, format_table, learned_row,
                                        write_outputs)

    placers = [p.strip() for p in args.placers.split(",") if p.strip()]
    check_placer_names(placers)
    if args.samples is not None and args.samples < 1:
        raise PlacerError("--samples must be at least 1")
    graph = load_graph_from_args(args)
    devices = devices_from_args(args)
    names = [d.name for d in devices]
    caps = caps_from_devices(devices)
    protocol = MeasureProtocol(warmup=args.warmup, repeats=args.repeats, timeout_s=args.timeout)

    start = time.perf_counter()
    cost = ProfiledCostModel.for_graph(graph, devices, refresh=args.refresh_profile)
    profile_s = time.perf_counter() - start
    print(f"profile: {'cached' if cost.from_cache else f'measured in {profile_s:.1f} s'} ({cost.path})",
          file=sys.stderr)

    rows = baseline_rows(graph, names, cost, caps, placers, seed=args.seed,
                         options={"random_search": _random_search_options(graph, names, args)}
                         if "random_search" in placers else None)
    if args.include_rl:
        rows.append(learned_row(graph, args.include_rl, names))
    measurer = RealMeasurer(graph, devices, protocol=protocol, seed=args.seed)
    comparison = compare(graph, names, measurer, cost, rows, caps,
                         progress=lambda row: print(f"measuring {row.name} ...", file=sys.stderr))
    comparison.info = {"profile": str(cost.path), "profile_cached": cost.from_cache,
                       "protocol": protocol.to_dict(), "devices": [str(d) for d in devices]}

    print(format_table(comparison))
    _warn_if_profile_drifted(comparison, cost)
    out = Path(args.out) if args.out else Path("runs") / f"compare-{Path(args.graph).stem}"
    paths = write_outputs(comparison, out, plot=not args.no_plot)
    print(f"saved {', '.join(str(p) for p in paths)}")
    return 0


def _random_search_options(graph, names: list[str], args: argparse.Namespace) -> dict:
    """random_search searches the learner's space with the learner's sample count: the groups and
    samples of the --include-rl run (its summary.json); --samples sets the count instead."""
    from placer.graph.grouping import METHODS, group_graph
    from placer.placers.compare import run_summary

    summary = run_summary(args.include_rl) if args.include_rl else {}
    options = {"samples": args.samples or summary.get("samples") or DEFAULT_SAMPLES}
    method = summary.get("grouping", "partition")
    if summary.get("groups") and method in METHODS:   # a grouping derived from a placement cannot be redone here
        options["grouping"] = group_graph(graph, summary["groups"], len(names), method)
    return options


def _warn_if_profile_drifted(comparison, cost) -> None:
    """The lower bound and predictions come from the profile: say so when the machine now runs
    the graph at a clearly different speed than when it was profiled."""
    for row in comparison.rows:
        device = row.name.removeprefix("single:")
        profiled = cost.profile.step_times.get(device)
        if row.placer == "single" and row.step_time and profiled and not 0.8 < row.step_time / profiled < 1.25:
            print(f"note: {device} ran the whole graph in {row.step_time * 1e3:.1f} ms now but "
                  f"{profiled * 1e3:.1f} ms when profiled{' (cached profile)' if cost.from_cache else ''}; "
                  "the lower bound and predictions assume the profiled speed (--refresh-profile measures again)",
                  file=sys.stderr)
