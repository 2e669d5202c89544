"""The training step (forward, loss, backward, optimizer update), measured side by side in one run.

1. Single device: every node on one CPU device against the zoo's torch module trained eagerly:
   same weights, same inputs, same loss (the sum over float outputs of mean(y^2)/2), same
   optimizer (SGD, lr 0.01, momentum 0.9), same intra-op threads, interleaved. Target: at most 1.15x.
2. Two virtual CPUs (cpu:0[threads=1], cpu:1[threads=1]): `placer train --objective training`
   (profiled simulator, then its closing comparison): the best baseline, the learned placement and
   the lower bound of the training step, all measured in that one comparison.

    python benchmarks/training_step.py [--quick] [--threads N] [--rounds R] [--models a,b]
                                       [--placement-models a,b] [--samples N] [--skip-single] [--skip-placement]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from _bench import ThreadRunner, eager_row, machine_note, zoo_model_and_inputs, zoo_path
from placer.cli import main as placer
from placer.engines.torch.executor import PlacedExecutor
from placer.engines.torch.training import build_optimizer
from placer.measure.intervals import Interval, format_ratio, verdict_words
from placer.program.training import TrainingSpec
from placer.placement import Placement

# (name, options): options shared by the export and the eager model so the weights are the same
MODELS = {"inception_v3": {}, "resnet50": {}, "rnnlm": {}, "nmt": {},
          "transformer": {"layers": 2, "seq_len": 64, "vocab": 8000}}
QUICK = {"resnet50": {}, "rnnlm": {"batch": 8, "seq_len": 10, "vocab": 1000}}
PLACED = ("inception_v3", "rnnlm")
TWO_CPUS = "cpu:0[threads=1],cpu:1[threads=1]"


def eager_step(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], optimizer: torch.optim.Optimizer):
    """One eager training step with the executor's default loss."""
    def step() -> None:
        outputs = module(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        loss = sum(torch.mean(y ** 2) / 2 for y in outputs if y.is_floating_point())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def single_device(models: dict[str, dict], threads: int, rounds: int) -> list[float]:
    """Part 1: the executor's training step over torch eager's, one line per model."""
    print(f"single-device training step vs torch eager, {threads} thread(s), {rounds} interleaved rounds")
    print(f"{'model':14s} {'nodes':>5s} {'eager ms':>9s} {'placer ms':>9s} {'ratio [95%]':>6s}")
    runner = ThreadRunner(threads)
    ratios = []
    for name, opts in models.items():
        graph, module, feeds, inputs = zoo_model_and_inputs(name, **opts)
        module.eval()   # the export's semantics (batch-norm on its running statistics), now with gradients
        spec = TrainingSpec()
        eager = eager_step(module, inputs, build_optimizer(spec.optimizer, list(module.parameters())))
        placement = Placement.single_device(list(graph.nodes), "cpu")
        with PlacedExecutor(graph, placement, [f"cpu[threads={threads}]"], training=spec) as executor:
            ratios.append(eager_row(name, len(graph.nodes), runner, eager, lambda: executor.run(feeds), rounds, 9))
    runner.close()
    worst = max(ratios, key=lambda r: r.value)
    print(f"worst ratio {worst.format_ratio()} (target <= 1.15); ratio = placer / eager, "
          f"the median of the per-round ratios with its 95% interval")
    return ratios


def two_cpus(name: str, samples: int) -> dict:
    """Part 2: learn a training-step placement, then the closing comparison measures it with
    every baseline side by side; returns its compare.json."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        code = placer(["train", "--graph", str(zoo_path(name)), "--devices", TWO_CPUS, "--objective", "training",
                       "--reward", "simulated", "--samples", str(samples), "--run-dir", str(run), "--no-progress"])
        if code != 0:
            raise SystemExit(f"placer train failed on {name} ({code})")
        return json.loads((run / "compare" / "compare.json").read_text())


def _speedup(row: dict | None) -> str:
    """A row's speedup over the best single device, paired over the comparison's rounds: '1.47x [1.44, 1.50]'."""
    got = (row or {}).get("speedup_vs_best_single_interval")
    return format_ratio(got["value"], got["low"], got["high"]) if got else "-"


def placement_table(names: list[str], samples: int) -> None:
    """Part 2 for each model: best single device, best baseline and the run's placement (medians
    over the comparison's interleaved rounds, ms, and their speedups over the best single device
    paired over the same rounds), and the lower bound. The best baseline and the verdict are the
    comparison's own (`placer compare`)."""
    lines = []
    for name in names:
        data = two_cpus(name, samples)
        rows = {r["name"]: r for r in data["rows"] if r["step_time_s"] is not None}
        verdict = next(v for v in data["verdicts"] if v["what"] == "the best baseline placer")
        lines.append((name, data["best_single_device_step_time_s"], rows[verdict["reference"]],
                      rows.get(verdict["subject"]), data["lower_bound"]["value"], verdict))
    print(f"\ntraining step on {TWO_CPUS}, measured side by side ({samples} simulated samples); "
          f"speedups over the best single device, paired, with 95% intervals")
    print(f"{'model':14s} {'best single':>11s} {'best baseline':>18s} {'ms':>8s} {'speedup':>19s} "
          f"{'learned ms':>10s} {'speedup':>19s} {'lower bound':>11s}")
    for name, single, best, learned, bound, verdict in lines:
        ms = f"{learned['step_time_s'] * 1e3:10.1f}" if learned else f"{'-':>10s}"
        got = verdict["speedup"]
        print(f"{name:14s} {single * 1e3:11.1f} {best['name']:>18s} {best['step_time_s'] * 1e3:8.1f} "
              f"{_speedup(best):>19s} {ms} {_speedup(learned):>19s} {bound * 1e3:11.1f}   "
              f"{verdict['subject']} over {best['name']}: {format_ratio(got['value'], got['low'], got['high'])}, "
              f"{verdict_words(Interval.from_dict(got))}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small models, few rounds, rnnlm placed only")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of both (default 1)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per model (at least 6)")
    parser.add_argument("--models", default=None, help="comma-separated zoo names (part 1)")
    parser.add_argument("--placement-models", default=None, help="comma-separated zoo names (part 2)")
    parser.add_argument("--samples", type=int, default=None, help="simulated samples of each learned placement")
    parser.add_argument("--skip-single", action="store_true", help="skip part 1")
    parser.add_argument("--skip-placement", action="store_true", help="skip part 2")
    args = parser.parse_args()
    models = QUICK if args.quick else MODELS
    if args.models:
        models = {m: MODELS.get(m, {}) for m in args.models.split(",")}
    print(machine_note())
    if not args.skip_single:
        single_device(models, args.threads, args.rounds or (6 if args.quick else 10))
    if not args.skip_placement:
        names = args.placement_models.split(",") if args.placement_models else (["rnnlm"] if args.quick else PLACED)
        placement_table(names, args.samples or (200 if args.quick else 1000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
