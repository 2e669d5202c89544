"""`placer run`: run a model once under a placement and save its outputs — the way to check from
outside that a placement computes the same thing as any other."""

from __future__ import annotations

import argparse
import sys

from placer.commands.common import (add_devices_arg, add_engine_arg, add_graph_args, add_objective_args,
                                    add_pipeline_args, add_placement_args, hardware_settings, model_settings,
                                    placement_settings, step_settings)

HELP = "run the model once under a placement and save its outputs"


def register(subparsers) -> None:
    """Add the `run` sub-command."""
    parser = subparsers.add_parser(
        "run", help=HELP,
        description="Run one step of the model under a placement (--placement, --device, or the one "
                    "stored in the file; else everything on the CPU). Inputs come from --inputs, the "
                    "missing ones random from --seed (zeros for integer inputs); outputs go to --outputs. "
                    "With --objective training the step is a training step and --outputs gets `loss`, "
                    "`grad:<initializer>` and `updated:<initializer>` (after one optimizer update). "
                    "--engine onnxruntime runs it in ONNX Runtime, one session per device partition. "
                    "With --micro-batches M the step is pipelined: micro-batch k's inputs are random from "
                    "--seed + k (an --inputs array `name` feeds every micro-batch, `name#k` micro-batch k), "
                    "its outputs are `<output>#k`, and a training step's gradients are summed over the M.")
    add_graph_args(parser)
    add_placement_args(parser)
    add_devices_arg(parser)
    add_objective_args(parser)
    add_engine_arg(parser)
    add_pipeline_args(parser)
    parser.add_argument("--outputs", metavar="OUT.npz", help="write the graph outputs here (.npz)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    parser.add_argument("--timeout", type=float, default=None, metavar="S", help="limit of the step in seconds")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run once (`placer.jobs.run`) and print each output's shape, dtype and a checksum; 1 when the step fails."""
    import numpy as np

    from placer.jobs.run import RunSettings, run as run_step

    result = run_step(RunSettings(model_settings(args), placement_settings(args), hardware_settings(args),
                                  step_settings(args), args.outputs, args.seed, args.timeout))
    if result.failure:
        print(f"failed ({result.failure}): {result.reason}", file=sys.stderr)
        return 1
    for name, value in result.outputs.items():
        print(f"{name}  {value.dtype} {list(value.shape)}  sum {float(value.astype(np.float64).sum()):.6g}")
    if args.outputs:
        print(f"outputs written to {args.outputs}")
    return 0
