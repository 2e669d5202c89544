"""`placer zoo list` and `placer zoo export NAME`: the built-in benchmark graphs."""

from __future__ import annotations

import argparse

from placer.commands.common import print_table

HELP = "list or export the built-in benchmark graphs"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `placer zoo` with its `list` and `export` actions."""
    parser = subparsers.add_parser("zoo", help=HELP,
                                   description="The built-in benchmark graphs (torch definitions exported to ONNX).")
    actions = parser.add_subparsers(dest="zoo_action", required=True, metavar="ACTION")
    actions.add_parser("list", help="name, description, parameters and default input shapes of each model")
    export = actions.add_parser("export", help="export one model to an ONNX file")
    export.add_argument("name", help="zoo model name (see `placer zoo list`)")
    export.add_argument("-o", "--output", default=None, metavar="PATH", help="output file (default: NAME.onnx)")
    export.add_argument("--batch", type=int, default=None, metavar="N", help="batch size")
    export.add_argument("--seq-len", type=int, default=None, metavar="N",
                        help="sequence length (sequence models only)")
    export.add_argument("--layers", type=int, default=None, metavar="N",
                        help="number of layers (models that have the option: transformer, the llamas)")
    export.add_argument("--vocab", type=int, default=None, metavar="N",
                        help="vocabulary size (models that have the option: rnnlm, nmt, transformer, the llamas)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """List the zoo (`placer.jobs.zoo.LISTING`), or export one model (`placer.jobs.zoo.export`)."""
    return _list() if args.zoo_action == "list" else _export(args)


def _list() -> int:
    from placer.jobs.zoo import LISTING

    print_table([(e.name, f"{e.parameters / 1e9:.1f}B" if e.parameters >= 1e9 else f"{e.parameters / 1e6:.1f}M",
                  " ".join(f"{name}={'x'.join(map(str, shape))}" for name, shape in e.input_shapes.items()),
                  " ".join(f"{k}={v}" for k, v in e.defaults.items()), e.description) for e in LISTING],
                ("NAME", "PARAMS", "INPUTS", "DEFAULTS", "DESCRIPTION"))
    return 0


def _export(args: argparse.Namespace) -> int:
    from placer.jobs.zoo import ExportSettings, export

    result = export(ExportSettings(args.name, args.output, args.batch, args.seq_len, args.layers, args.vocab))
    print(f"wrote {result.path} ({result.size_bytes / 1e6:.1f} MB) in {result.seconds:.1f} s")
    return 0
