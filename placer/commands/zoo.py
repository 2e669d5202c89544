"""`placer zoo list` and `placer zoo export NAME`: the built-in benchmark graphs."""

from __future__ import annotations

import argparse
import dataclasses
import time

from placer.commands.common import check_writable
from placer.errors import PlacerError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `placer zoo` with its `list` and `export` actions."""
    parser = subparsers.add_parser("zoo", help="list or export the built-in benchmark graphs",
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
                        help="number of layers (models that have the option: transformer)")
    export.add_argument("--vocab", type=int, default=None, metavar="N",
                        help="vocabulary size (models that have the option: rnnlm, nmt, transformer)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Dispatch to list or export."""
    return _list() if args.zoo_action == "list" else _export(args)


def _format_shapes(shapes: dict[str, tuple[int, ...]]) -> str:
    return " ".join(f"{name}={'x'.join(map(str, shape))}" for name, shape in shapes.items())


def _list() -> int:
    import graphs

    rows = []
    for name in graphs.names():
        entry = graphs.get(name)
        defaults = dataclasses.asdict(entry.options())
        rows.append((name, f"{graphs.parameter_count(name) / 1e6:.1f}M", _format_shapes(graphs.input_shapes(name)),
                     " ".join(f"{k}={v}" for k, v in defaults.items()), entry.description))
    header = ("NAME", "PARAMS", "INPUTS", "DEFAULTS", "DESCRIPTION")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    return 0


def _export(args: argparse.Namespace) -> int:
    import graphs

    graphs.get(args.name)  # an unknown name fails before anything is built
    path = check_writable(args.output or f"{args.name}.onnx", "-o")
    options = {key: value for key in ("layers", "vocab") if (value := getattr(args, key)) is not None}
    start = time.perf_counter()
    try:
        graphs.export(args.name, path, batch=args.batch, seq_len=args.seq_len, **options)
    except OSError as exc:
        raise PlacerError(f"cannot write {path}: {exc.strerror or exc}; choose another -o PATH") from exc
    seconds = time.perf_counter() - start
    size_mb = path.stat().st_size / 1e6
    print(f"wrote {path} ({size_mb:.1f} MB) in {seconds:.1f} s")
    return 0
