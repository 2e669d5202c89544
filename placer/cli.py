"""The `placer` command: argument parsing and printing only; each sub-command lives in
`placer/commands/<name>.py` with `register(subparsers)` and a `run(args) -> int` it sets as default."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from placer.commands.common import check_seed
from placer.errors import PlacerError

# Sub-command modules, in the order `placer --help` lists them.
COMMANDS = ["train", "pretrain", "place", "apply", "measure", "run", "compare", "inspect", "show", "zoo", "cluster"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="placer", description="Learn fast device placements for ONNX models.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"placer.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"placer.commands.{name}":
                continue  # not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        check_seed(args)   # every command's --seed, before any of them starts work
        return int(args.func(args) or 0)
    except PlacerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
