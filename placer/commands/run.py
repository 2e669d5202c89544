"""`placer run`: run a model once under a placement and save its outputs — the way to check from
outside that a placement computes the same thing as any other."""

from __future__ import annotations

import argparse
from pathlib import Path

from placer.commands.common import (add_devices_arg, add_engine_arg, add_graph_args, add_objective_args,
                                    add_pipeline_args, add_placement_args)


def register(subparsers) -> None:
    """Add the `run` sub-command."""
    parser = subparsers.add_parser(
        "run", help="run the model once under a placement and save its outputs",
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
    """Run once and print each output's shape, dtype and a checksum; 1 when the step fails."""
    import sys

    import numpy as np

    from placer.commands.common import placed_model_from_args
    from placer.engines.failures import ExecutionFailure
    from placer.engines.torch.executor import PlacedExecutor
    from placer.graph.feeds import generated_inputs, generated_note, step_feeds

    model = placed_model_from_args(args, {"--outputs": args.outputs})
    graph, placement, devices, training, pipeline = (model.graph, model.placement, model.devices,
                                                     model.training, model.pipeline)
    feeds = step_feeds(graph, args.seed)   # --inputs, the rest random from --seed
    if pipeline.pipelined:
        # micro-batch k: random inputs from seed + k, then --inputs' `name` (every micro-batch) and `name#k`
        feeds = [{**step_feeds(graph, args.seed + k), **model.micro_batch_inputs[k]}
                 for k in range(pipeline.micro_batches)]
    try:
        if args.engine == "onnxruntime":
            # the engine placer.engines.onnxruntime.load runs split models with: the partitions' sessions at once
            from placer.engines.onnxruntime.placed import OrtPlacement

            with OrtPlacement(graph, placement, devices, pipeline=pipeline) as placed:
                outputs = placed.run_arrays(feeds, timeout_s=args.timeout)
        else:
            with PlacedExecutor(graph, placement, devices, training=training, pipeline=pipeline) as executor:
                outputs = {k: v.detach().cpu().numpy() for k, v in executor.run(feeds, timeout_s=args.timeout).items()}
    except ExecutionFailure as exc:
        generated = [n for n in generated_inputs(graph) if any(n not in own for own in model.micro_batch_inputs)]
        print(f"failed ({exc.failure}): {exc}{generated_note(generated) if exc.failure == 'kernel_error' else ''}",
              file=sys.stderr)
        return 1
    for name, value in outputs.items():
        print(f"{name}  {value.dtype} {list(value.shape)}  sum {float(value.astype(np.float64).sum()):.6g}")
    if args.outputs:
        Path(args.outputs).parent.mkdir(parents=True, exist_ok=True)   # check_writable found it can be made
        np.savez(args.outputs, **outputs)
        print(f"outputs written to {args.outputs}")
    return 0
