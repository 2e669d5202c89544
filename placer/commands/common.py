"""Arguments several sub-commands share (--graph, --input-shape, --devices) and how they load."""

from __future__ import annotations

import argparse
import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placer.engines import ENGINES
from placer.errors import PlacerError
from placer.jobs import settings


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
    not, so that `refuse_ignored_on_cluster` refuses them there instead of dropping them silently:
    each one typed on the command line is noted in the parsed arguments, whatever its value (its
    default typed out, `--blocks 3` to compare, does nothing there either)."""
    for option in options:
        action = parser._option_string_actions[option]
        action.__class__ = _noted(type(action), option)
    parser.set_defaults(_ignored_on_cluster=options, _given_ignored_on_cluster=())


@functools.cache
def _noted(kind: type, option: str) -> type:
    """The argparse action class `kind` that also notes `option` as typed (`ignored_on_cluster`)."""
    def __call__(self, parser, namespace, values, option_string=None):
        kind.__call__(self, parser, namespace, values, option_string)
        namespace._given_ignored_on_cluster = (*getattr(namespace, "_given_ignored_on_cluster", ()), option)
    return type(kind.__name__, (kind,), {"__call__": __call__})


def refuse_ignored_on_cluster(args: argparse.Namespace) -> None:
    """A `PlacerError` in one line naming the options `ignored_on_cluster` marked that were typed on
    the command line, when every figure is simulated (`simulated_only`): they would do nothing."""
    if not simulated_only(args):
        return
    typed = set(getattr(args, "_given_ignored_on_cluster", ()))
    given = [o for o in getattr(args, "_ignored_on_cluster", ()) if o in typed]
    if given:
        raise PlacerError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} nothing on cluster "
                          f"{args.cluster!r}: nothing runs or is measured there, every figure is simulated from "
                          f"its datasheet figures; drop {'it' if len(given) == 1 else 'them'}")


def placement_on_cluster(cluster, placement):
    """`placement` with the cluster's devices as its device list (in the cluster's order); a
    `PlacerError` in one line when it puts a node on a device the cluster does not have."""
    import dataclasses

    outside = sorted(set(placement.nodes.values()) - set(cluster.device_names))
    if outside:
        raise PlacerError(f"the placement puts nodes on {', '.join(outside)}, which cluster {cluster.name!r} does not "
                          f"have (its devices: {', '.join(cluster.device_names)}); give a placement made for it "
                          f"(placer train --cluster), or rename a device with --map {outside[0]}=<one of those>")
    return dataclasses.replace(placement, devices=cluster.device_names)


def add_engine_arg(parser: argparse.ArgumentParser) -> None:
    """--engine: what runs a placement."""
    parser.add_argument("--engine", choices=ENGINES, default="torch",
                        help="what runs the placement: placer's torch engine (default; the training objective "
                             "needs it) or ONNX Runtime, one session per device partition, the devices at once")


def check_seed(args: argparse.Namespace) -> None:
    """A --seed no generator takes is a `PlacerError` in one line, for every command that has the
    option (`placer.cli` calls this before the command starts)."""
    settings.check_seed(getattr(args, "seed", None))


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
                                 getattr(args, "engine", "torch"))


def check_engine_args(args: argparse.Namespace) -> None:
    """Refuse, before any work, what the chosen engine cannot do (a training step in ONNX Runtime)."""
    step_settings(args).check_engine()


def load_graph_from_args(args: argparse.Namespace):
    """The `OpGraph` named by --graph (a zoo name is exported on first use), shapes bound by
    --input-shape and --inputs, whose arrays it keeps to feed every run."""
    return model_settings(args).graph_only()


def _graph_and_micro_batch_inputs(args: argparse.Namespace):
    """The graph of `load_graph_from_args`, and per micro-batch k the --inputs arrays `name#k`
    (`placer run --micro-batches M` only)."""
    micro_batches = getattr(args, "micro_batches", 1) if getattr(args, "command", None) == "run" else 1
    return model_settings(args).load(micro_batches)


def devices_from_args(args: argparse.Namespace):
    """The `Device` list named by --devices or --cluster (its devices with their memory as caps), or
    the machine's default set."""
    return hardware_settings(args).device_list()


def cluster_from_args(args: argparse.Namespace):
    """The cluster --cluster names, or None."""
    return hardware_settings(args).described


def simulated_only(args: argparse.Namespace) -> bool:
    """Whether --cluster describes hardware this machine is not: then every figure is simulated,
    and whatever would run for real is refused (`refuse_real`)."""
    return hardware_settings(args).simulated_only


def refuse_real(args: argparse.Namespace, what: str) -> None:
    """A `PlacerError` in one line when `what` (something that runs placements for real) is asked
    for on a described cluster this machine is not."""
    hardware_settings(args).refuse_real(what)


def add_placement_args(parser: argparse.ArgumentParser) -> None:
    """--placement / --device / --map, as the commands that run a placement take them."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--placement", metavar="P.json", help="placement file (format placer.placement/1)")
    group.add_argument("--device", metavar="D", help="put every node on this one device, e.g. cpu or cuda:0")
    parser.add_argument("--map", action="append", default=[], metavar="FROM=TO",
                        help="rename a device of the placement, e.g. cuda:1=cuda:0 (repeatable)")


def placement_from_args(args: argparse.Namespace, graph):
    """The placement to run: --placement, else --device, else the one stored in the model file
    (`placer apply` annotations), else everything on the plain CPU. Checked against `graph`."""
    from placer.annotate.read import read_placement
    from placer.annotate.resolve import parse_device_map, resolve_placement
    from placer.placement import Placement

    if getattr(args, "placement", None):
        placement = Placement.load(args.placement)
    elif getattr(args, "device", None):
        placement = Placement.single_device(list(graph.nodes), args.device, graph.sha256)
    else:
        placement = read_placement(graph.model) or Placement.single_device(list(graph.nodes), "cpu", graph.sha256)
    return resolve_placement(graph, placement, parse_device_map(getattr(args, "map", [])))


def check_writable(path, option: str, *, folder: bool = False) -> Path:
    """`path` as a `Path`, once writing there has been tried: a file (its folder, and the file
    itself when it exists) or, with `folder`, a folder. Leaves nothing behind; a `PlacerError`
    naming `option` when it cannot be written, so that no long work starts first."""
    path = Path(path)
    where = path if folder else path.parent
    if path.is_dir() != folder and path.exists():
        raise PlacerError(f"{option} {path} is {'a file' if folder else 'a folder'}; "
                          f"give {'a folder' if folder else 'a file path'}")
    created = [p for p in (where, *where.parents) if not p.exists()]
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where):
            pass
        if path.exists() and not folder:
            path.open("ab").close()   # an existing file must be writable too, and stays as it is
    except OSError as exc:
        raise PlacerError(f"cannot write {option} {path}: {exc.strerror or exc}; "
                          "give a path you can write to") from None
    finally:
        for made in created:   # deepest first; only the empty folders this check made
            try:
                made.rmdir()
            except OSError:
                pass
    return path


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


def pipeline_from_args(args: argparse.Namespace):
    """The `Pipeline` of --micro-batches and --schedule (M = 1: no pipelining)."""
    return step_settings(args).pipeline()


def training_spec_from_args(args: argparse.Namespace, graph):
    """The `TrainingSpec` of --objective training (targets read and checked), else None."""
    return step_settings(args).training_spec(graph)


@dataclass
class PlacedModel:
    """What `placer run` and `placer measure` start from: the graph (with the --inputs that feed
    every step), the placement checked against it, its devices, the step (training, pipeline) and
    per micro-batch the --inputs arrays of that micro-batch alone (`name#k`, `placer run`)."""

    graph: Any
    placement: Any
    devices: list
    training: Any
    pipeline: Any
    micro_batch_inputs: list


def placed_model_from_args(args: argparse.Namespace, writes: dict[str, str | None] | None = None) -> PlacedModel:
    """The graph, placement, devices, training step, pipeline and --inputs that the arguments of
    a command running a placement name, every one checked before any real work: the engine's
    options first, then each path of `writes` (option -> path; None: not asked for)."""
    from placer.graph.placement_check import assignment

    check_engine_args(args)
    for option, path in (writes or {}).items():
        if path:
            check_writable(path, option)
    graph, micro_batch_inputs = _graph_and_micro_batch_inputs(args)
    placement = placement_from_args(args, graph)
    devices = devices_for(args, placement)
    assignment(graph, placement, [d.name for d in devices])   # here, not as a failed measurement: a user's error
    training = training_spec_from_args(args, graph)
    pipeline = pipeline_from_args(args)
    return PlacedModel(graph, placement, devices, training, pipeline, micro_batch_inputs)


def devices_for(args: argparse.Namespace, placement):
    """--devices when given, else the placement's own device list (each CPU device with its share
    of the cores)."""
    from placer.devices import parse_devices

    refuse_real(args, f"placer {args.command}")
    if getattr(args, "cluster", None):
        return devices_from_args(args)
    if getattr(args, "devices", None):
        return parse_devices(args.devices)
    return parse_devices(list(placement.devices))


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

    return RoundsProtocol(warmup=args.warmup, min_rounds=args.min_rounds, max_rounds=args.max_rounds,
                          max_seconds=args.max_seconds, precision=args.precision, seed=seed, blocks=args.blocks)
