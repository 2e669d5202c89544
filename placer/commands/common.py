"""Arguments several sub-commands share (--graph, --input-shape, --devices, ...) and the job
settings they make. Light to import: `placer --help` loads every command module."""

from __future__ import annotations

import argparse

from placer.errors import PlacerError
from placer.jobs import settings
from placer.jobs.paths import check_writable  # noqa: F401  (the commands try their paths before a job starts)


def add_graph_args(parser: argparse.ArgumentParser) -> None:
    """--graph and --input-shape, as every command that reads a model takes them."""
    parser.add_argument("--graph", required=True,
                        help="ONNX file, or the name of a zoo model such as inception_v3.onnx")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=1x3x224x224",
                        help="bind a graph input's dynamic dimensions by position; symbolic names it shares "
                             "with other inputs are bound there too (repeatable)")
    parser.add_argument("--inputs", metavar="IN.npz", default=None,
                        help="sample inputs (an .npz of input name -> array, numpy.savez): they bind their inputs' "
                             "shapes and feed every run of the model (the shapes' real run, the profile, each "
                             "measured step), so an If takes their branch and a Loop their trip count; inputs "
                             "left out are generated (standard normal floats, zeros for integers)")


def add_devices_arg(parser: argparse.ArgumentParser) -> None:
    """--devices, or --cluster: hardware described in a file or the catalogue, placed for in the simulator."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--devices", default=None, metavar="D1,D2",
                       help="devices to place on, e.g. cpu:0,cpu:1 or cuda:0,cpu "
                            "(default: every GPU plus the CPU; without a GPU, two virtual CPU devices)")
    add_cluster_arg(group, "place for described hardware instead (placer cluster list; a TOML file describes any "
                           "other): every figure is simulated from its devices' and links' datasheet figures, "
                           "memory capacities are hard caps, and nothing runs for real unless the file describes "
                           "this machine (placer cluster describe-local)")


def add_cluster_arg(parser, help: str) -> None:
    """--cluster NAME|FILE.toml: a catalogue cluster or a cluster file (`placer.hardware.load_cluster`)."""
    parser.add_argument("--cluster", default=None, metavar="NAME|FILE.toml", help=help)


def ignored_on_cluster(parser: argparse.ArgumentParser, *options: str) -> None:
    """Mark `options` (already added) as doing nothing when --cluster is hardware this machine is
    not, so that `refuse_ignored_on_cluster` refuses them there instead of dropping them silently.
    Their parsed value is None (False for a flag) where they were not typed, so that one typed shows
    whatever its value (its default typed out, `--blocks 3` to compare, does nothing there either);
    `option` reads each one with its default."""
    defaults = {_dest(o): parser.get_default(_dest(o)) for o in options}
    parser.set_defaults(**{d: None for d, value in defaults.items() if value is not False},
                        _ignored_on_cluster=options, _untyped_defaults=defaults)


def option(args: argparse.Namespace, dest: str):
    """The value of the option `dest`: as typed, else its default (`ignored_on_cluster`)."""
    value = getattr(args, dest)
    return getattr(args, "_untyped_defaults", {}).get(dest) if value is None else value


def _dest(option_string: str) -> str:
    return option_string.lstrip("-").replace("-", "_")


def refuse_ignored_on_cluster(args: argparse.Namespace) -> None:
    """A `PlacerError` in one line naming the options `ignored_on_cluster` marked that were typed on
    the command line, when every figure is simulated (`simulated_only`): they would do nothing."""
    given = [o for o in getattr(args, "_ignored_on_cluster", ()) if getattr(args, _dest(o)) not in (None, False)]
    if given and hardware_settings(args).simulated_only:
        raise PlacerError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} nothing on cluster "
                          f"{args.cluster!r}: nothing runs or is measured there, every figure is simulated from "
                          f"its datasheet figures; drop {'it' if len(given) == 1 else 'them'}")


def add_engine_arg(parser: argparse.ArgumentParser) -> None:
    """--engine: what runs a placement."""
    from placer.engines import ENGINES

    parser.add_argument("--engine", choices=ENGINES, default="torch",
                        help="what runs the placement: placer's torch engine (default; the training objective "
                             "needs it) or ONNX Runtime, one session per device partition, the devices at once")


def model_settings(args: argparse.Namespace) -> settings.ModelSettings:
    """--graph, --input-shape and --inputs as a job takes them."""
    return settings.ModelSettings(args.graph, tuple(args.input_shape), getattr(args, "inputs", None))


def hardware_settings(args: argparse.Namespace) -> settings.HardwareSettings:
    """--devices or --cluster as a job takes them."""
    return settings.HardwareSettings(getattr(args, "devices", None), getattr(args, "cluster", None))


def step_settings(args: argparse.Namespace) -> settings.StepSettings:
    """--objective, its training step's options, --micro-batches, --schedule and --engine as a job takes them."""
    return settings.StepSettings(getattr(args, "objective", "inference"), getattr(args, "loss", "mse"),
                                 getattr(args, "targets", None), getattr(args, "optimizer", "sgd"),
                                 getattr(args, "micro_batches", 1), getattr(args, "schedule", "1f1b"),
                                 option(args, "engine") if hasattr(args, "engine") else "torch")


def placement_settings(args: argparse.Namespace) -> settings.PlacementSettings:
    """--placement, --device and --map as a job takes them."""
    return settings.PlacementSettings(args.placement, args.device, tuple(args.map))


def add_placement_args(parser: argparse.ArgumentParser) -> None:
    """--placement / --device / --map, as the commands that run a placement take them."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--placement", metavar="P.json",
                       help="placement file (format placer.placement/1); apply and show also take a plan file "
                            "(placer.plan/1), whose split ops they write and draw")
    group.add_argument("--device", metavar="D", help="put every node on this one device, e.g. cpu or cuda:0")
    parser.add_argument("--map", action="append", default=[], metavar="FROM=TO",
                        help="rename a device of the placement, e.g. cuda:1=cuda:0 (repeatable)")


def add_objective_args(parser: argparse.ArgumentParser) -> None:
    """--objective and the training step's --loss, --targets, --optimizer."""
    from placer.program.training import LOSS_HELP

    parser.add_argument("--objective", choices=("inference", "training"), default="inference",
                        help="what one step is: the forward pass (default), or a training step "
                             "(forward, loss, backward, optimizer update of every float initializer the loss depends on)")
    parser.add_argument("--loss", choices=("mse", "cross_entropy"), default="mse",
                        help=f"loss of a training step. {LOSS_HELP}")
    parser.add_argument("--targets", metavar="T.npz", help="targets or labels of the loss, output name -> array")
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd",
                        help="update of a training step: sgd (lr 0.01, momentum 0.9; default) or adam (lr 0.001)")


def add_pipeline_args(parser: argparse.ArgumentParser) -> None:
    """--micro-batches and --schedule: a pipelined step (`placer.program.pipeline`)."""
    parser.add_argument("--micro-batches", type=int, default=1, metavar="M",
                        help="push M micro-batches through the placement per step, several in flight (the model "
                             "is the per-micro-batch graph; default 1: one input, no pipelining)")
    parser.add_argument("--schedule", choices=("1f1b", "gpipe"), default="1f1b",
                        help="order of a pipelined training step: 1f1b (PipeDream-flush; default) or gpipe "
                             "(every forward, then every backward); one optimizer update per step either way")


def add_rounds_args(parser: argparse.ArgumentParser, *, warmup: int = 2, blocks: int = 1) -> None:
    """How placements measured side by side are measured: in --blocks blocks, each of interleaved
    rounds until every paired interval is within --precision, or a cap in rounds or seconds."""
    from placer.measure.rounds import RoundsProtocol

    d = RoundsProtocol()
    parser.add_argument("--warmup", type=int, default=warmup, metavar="N",
                        help=f"untimed steps of each placement first, interleaved too (default {warmup})")
    parser.add_argument("--min-rounds", type=int, default=d.min_rounds, metavar="N",
                        help=f"interleaved rounds at least; each runs every placement once, shuffled (default {d.min_rounds})")
    parser.add_argument("--max-rounds", type=int, default=d.max_rounds, metavar="N",
                        help=f"rounds at most, even when an interval is still wide (default {d.max_rounds})")
    parser.add_argument("--max-seconds", type=float, default=d.max_seconds, metavar="S",
                        help=f"seconds of rounds at most (default {d.max_seconds:g})")
    parser.add_argument("--precision", type=float, default=d.precision, metavar="F",
                        help=f"stop once every 95%% interval is within +-F of its value (default {d.precision})")
    parser.add_argument("--blocks", type=int, default=blocks, metavar="N",
                        help="measure in N blocks, every placement built afresh in each, the rounds options per "
                             "block, --max-seconds shared; intervals then hold the variation between blocks, as "
                             f"between runs (default {blocks})")


def rounds_from_args(args: argparse.Namespace, seed: int = 0):
    """The `RoundsProtocol` of add_rounds_args' options."""
    from placer.measure.rounds import RoundsProtocol

    given = {d: option(args, d) for d in ("warmup", "min_rounds", "max_rounds", "max_seconds", "precision", "blocks")}
    return RoundsProtocol(**given, seed=seed)


def print_table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> None:
    """`rows` under `header`, every column but the last padded to its widest cell."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        print(("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1]).rstrip())
