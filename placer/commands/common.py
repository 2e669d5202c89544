"""Arguments several sub-commands share (--graph, --input-shape, --devices) and how they load."""

from __future__ import annotations

import argparse

from placer.errors import PlacerError


def add_graph_args(parser: argparse.ArgumentParser) -> None:
    """--graph and --input-shape, as every command that reads a model takes them."""
    parser.add_argument("--graph", required=True,
                        help="ONNX file, or the name of a zoo model such as inception_v3.onnx")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=1x3x224x224",
                        help="bind a graph input's dynamic dimensions (repeatable)")


def add_devices_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--devices", default=None, metavar="D1,D2",
                        help="devices to place on, e.g. cpu:0,cpu:1 or cuda:0,cpu "
                             "(default: every GPU plus the CPU; without a GPU, two virtual CPU devices)")


def load_graph_from_args(args: argparse.Namespace):
    """The `OpGraph` named by --graph (a zoo name is exported on first use), shapes bound."""
    from graphs import resolve
    from placer.graph.load import load_graph, parse_input_shapes

    return load_graph(resolve(args.graph), parse_input_shapes(args.input_shape))


def devices_from_args(args: argparse.Namespace):
    """The `Device` list named by --devices, or the machine's default set."""
    from placer.measure.devices import default_devices, parse_devices

    if getattr(args, "devices", None):
        return parse_devices(args.devices)
    return default_devices()


def require_file(path: str, what: str) -> None:
    import os

    if not os.path.exists(path):
        raise PlacerError(f"{what} {path} does not exist")
