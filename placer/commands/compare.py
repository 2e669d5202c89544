"""`placer compare`: every baseline placer, and optionally a learned placement, measured side by
side on the real devices in one run. The job is `placer.jobs.compare`; here are the arguments and
the printing."""

from __future__ import annotations

import argparse
import sys

from placer.commands.common import (add_devices_arg, add_engine_arg, add_graph_args, add_objective_args,
                                   add_pipeline_args, add_rounds_args, check_writable, hardware_settings,
                                   ignored_on_cluster, model_settings, option, refuse_ignored_on_cluster,
                                   rounds_from_args, step_settings)
HELP = "measure every baseline placer (and a learned placement) side by side"


def register(subparsers) -> None:
    """Add the `compare` sub-command."""
    from placer.jobs.compare import ALL_PLANS, BLOCKS, DEFAULT_PLANS, DEFAULT_SAMPLES, MEASURED_DEFAULT
    from placer.placers import PLACERS

    parser = subparsers.add_parser(
        "compare", help=HELP,
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
                    "Saves the whole table (table.txt), compare.csv, compare.json and a bar chart compare.png "
                    "(matplotlib) in --out, and ends with a summary of at most 10 lines (placer -v compare ... "
                    "prints the whole table too); --json prints what compare.json holds instead.")
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
    more = ",".join(p for p in ALL_PLANS if p not in DEFAULT_PLANS)
    parser.add_argument("--plans", default=None, metavar="P1,P2", help=f"plans beside the placements, or 'none': with "
                        f"--cluster priced (default: {','.join(DEFAULT_PLANS)}; also: {more}; plan_search spends "
                        f"--samples), on this machine run (default: {','.join(MEASURED_DEFAULT)}; ONNX Runtime: DDP)")
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


def compare_settings(args: argparse.Namespace):
    """The arguments as the job takes them (a `CompareSettings`)."""
    from placer.jobs.compare import CompareSettings

    return CompareSettings(model_settings(args), hardware_settings(args), step_settings(args),
                           placers=tuple(p.strip() for p in args.placers.split(",") if p.strip()),
                           plans=None if args.plans is None else
                           tuple(p.strip() for p in args.plans.split(",") if p.strip() not in ("", "none")),
                           include_rl=args.include_rl, include_placement=tuple(args.include_placement),
                           samples=args.samples, seed=args.seed, rounds=rounds_from_args(args, args.seed),
                           timeout_s=option(args, "timeout"), refresh_profile=args.refresh_profile, out=args.out,
                           history=not args.no_history, history_dir=option(args, "history_dir"), plot=not args.no_plot)


def run(args: argparse.Namespace) -> int:
    """Compare, then print its summary (the whole table too with placer -v; --json: what
    compare.json holds instead) and where it was saved."""
    from placer.evaluate.report import TABLE, closing_lines, comparison_json, nothing_ran
    from placer.jobs.compare import compare

    refuse_ignored_on_cluster(args)
    settings = compare_settings(args)
    # the paths are tried before any work (check_writable is the CLI's)
    check_writable(settings.out_dir, "--out", folder=True)
    if settings.history_folder is not None:
        check_writable(settings.history_folder, "--history-dir", folder=True)
    result = compare(settings, report=lambda text: print(text, file=sys.stderr))
    for note in result.profile_drift:
        print(f"note: {note}", file=sys.stderr)
    print(f"saved {', '.join(str(p) for p in result.saved)}", file=sys.stderr)
    failed = nothing_ran(result.comparison, settings.out_dir / TABLE)
    if args.json:
        print(comparison_json(result.comparison), end="")
    elif not failed:   # the whole table is in the output folder; its summary last
        print("\n".join(closing_lines(result.comparison, settings.out_dir / TABLE, args.verbose)))
    if failed:
        print(f"error: {failed}", file=sys.stderr)
        return 2
    return 0
