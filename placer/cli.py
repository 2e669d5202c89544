"""The `placer` command: argument parsing and printing only; each sub-command lives in
`placer/commands/<name>.py` with `register(subparsers)` and a `run(args) -> int` it sets as default.

Only the sub-command typed is registered; when none is (`placer --help`), or it is misspelt, each
is listed by its `HELP` line alone: registering `train` loads torch, and neither the listing nor
`placer cluster list` should wait for it."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from placer.errors import PlacerError
from placer.jobs.settings import check_seed

# Sub-command modules, in the order `placer --help` lists them.
COMMANDS = ["train", "pretrain", "place", "apply", "measure", "run", "compare", "inspect", "show", "zoo", "cluster"]


def typed_command(argv: list[str]) -> str | None:
    """The sub-command `argv` names, unless -h comes first or it names none of `COMMANDS`."""
    for arg in argv:
        if arg in ("-h", "--help"):
            return None
        if not arg.startswith("-"):   # the top-level options (-v) take no value: this is the command
            return arg if arg in COMMANDS else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of `command` alone, or of every sub-command (None)."""
    parser = argparse.ArgumentParser(prog="placer", description="Learn fast device placements for ONNX models.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in [command] if command else COMMANDS:
        module = importlib.import_module(f"placer.commands.{name}")
        if command:
            module.register(sub)
        else:   # the listing alone: its line, not its options (registering train loads torch)
            sub.add_parser(name, help=module.HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(typed_command(argv)).parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        check_seed(getattr(args, "seed", None))   # every command's --seed, before any of them starts work
        return int(args.func(args) or 0)
    except PlacerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
