"""Pipelined micro-batches: throughput of the partitioners users split chains with, and of a
learned placement, against the best single device, measured side by side (interleaved rounds).

For each model and each M (micro-batches per step) on two 1-thread virtual CPU devices: each
single device, the whole machine as one device (every core), `pipeline_dp`, `pipeline_balanced`,
`pipeline_params` and the policy's greedy placement (trained in the profiled simulator on the
pipelined step, warm-started from the fastest baseline there, as `placer train` is), all measured in
the same interleaved rounds.
Each row gives the step (median over the rounds), the throughput (micro-batches/s), the speedup over
the best single 1-thread device, over the whole machine and over pipeline_dp (paired over the same rounds: the median
of the per-round ratios, with its 95% interval; "~" marks a speedup tied with 1 (its interval within 2%), "?" one not resolved), the simulated step
and its bubble (idle share of the devices the placement uses) beside the textbook (p-1)/(m+p-1).

    python benchmarks/pipeline.py [--quick] [--models resnet50 transformer inception_v3]
                                  [--micro-batches 1 4 8] [--rounds R] [--samples N] [--no-learn]
                                  [--objective inference|training] [--schedule 1f1b|gpipe] [--out F.json]
    python benchmarks/pipeline.py --simulated --models resnet50 transformer inception_v3 rnnlm nmt --micro-batches 8
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from _bench import machine_note, save_json, zoo_graph
from placer.devices import parse_devices
from placer.measure.intervals import NOT_RESOLVED, TIED, format_ratio, verdict_record
from placer.costmodel.lower_bound import lower_bound
from placer.measure.measurer import MeasureProtocol, RealMeasurer
from placer.program.pipeline import Pipeline
from placer.costmodel.profile_cache import profiled_cost_model
from placer.measure.rounds import Candidate, RoundsProtocol, measure_in_rounds
from placer.costmodel.simulator import SimulatedMeasurer
from placer.program.training import TrainingSpec
from placer.costmodel.training_costs import TrainingStepCosts
from placer.placement import Placement
from placer.placers import PLACERS

DEVICES = "cpu:0[threads=1],cpu:1[threads=1]"
PARTITIONERS = ("pipeline_dp", "pipeline_balanced", "pipeline_params")
# --small: options that make each model quick to export and run (a smoke test of the script only)
SMALL = {"transformer": dict(seq_len=8, layers=2, vocab=100), "rnnlm": dict(batch=2, seq_len=5, vocab=50),
         "nmt": dict(batch=2, seq_len=5, vocab=50)}


def learned(graph, names, cost, pipeline, training, samples: int) -> Placement:
    """The policy's greedy placement after `samples` simulated pipelined steps, warm-started as
    `placer train --micro-batches M` is: from the baseline fastest on the simulated pipelined step
    (the pipeline partitioners among them)."""
    from placer.graph.grouping import group_graph
    from placer.policy.hparams import Hyperparameters
    from placer.policy.trainer import train
    from placer.policy.warm_start import plan_warm_start

    costs = TrainingStepCosts(graph, names, cost, training) if training is not None else cost
    warm = plan_warm_start(graph, names, costs, {}, group_graph(graph, None, len(names)), "best_baseline",
                           pipeline=pipeline)
    measurer = SimulatedMeasurer(graph, names, cost, training=training, pipeline=pipeline)
    with tempfile.TemporaryDirectory() as run_dir:
        train(graph, measurer, warm.grouping, run_dir, Hyperparameters(), samples=samples, seed=0, warm_start=warm)
        return Placement.load(Path(run_dir) / "greedy_placement.json")


def placements(graph, names, cost, pipeline, training, samples: int | None) -> dict[str, Placement]:
    """Every row's placement: each single device, the partitioners, the learned one."""
    nodes = list(graph.nodes)
    rows = {f"single {d}": Placement.single_device(nodes, d, devices=names) for d in names}
    costs = TrainingStepCosts(graph, names, cost, training) if training is not None else cost
    for name in PARTITIONERS:
        rows[name] = PLACERS[name].place(graph, names, costs, None)
    if samples:
        rows["learned"] = learned(graph, names, cost, pipeline, training, samples)
    return rows


def run_model(model: str, micro_batches: list[int], rounds: int, samples: int | None, objective: str,
              schedule: str, small: bool) -> list[dict]:
    graph = zoo_graph(model, **(SMALL.get(model, {}) if small else {}))
    devices = parse_devices(DEVICES)
    names = [d.name for d in devices]
    training = TrainingSpec() if objective == "training" else None
    cost = profiled_cost_model(graph, devices, training=training)
    protocol = MeasureProtocol(objective=objective)
    rows = []
    for m in micro_batches:
        pipeline = Pipeline(m, schedule)
        chosen = placements(graph, names, cost, pipeline, training, samples)
        sim = SimulatedMeasurer(graph, names, cost, training=training, pipeline=pipeline)
        measurer = RealMeasurer(graph, devices, protocol, training=training, pipeline=pipeline)
        whole = RealMeasurer(graph, parse_devices("cpu"), protocol, training=training, pipeline=pipeline)
        candidates = [Candidate(name, lambda p=p: measurer.open(p)) for name, p in chosen.items()]
        candidates.append(Candidate("whole machine",
                                    lambda: whole.open(Placement.single_device(list(graph.nodes), "cpu"))))
        result = measure_in_rounds(candidates, RoundsProtocol(warmup=1, min_rounds=rounds, max_rounds=rounds,
                                                              max_seconds=3600))
        step = {name: got.step_time for name, got in result.measurements.items() if got.ok}
        for name, got in result.measurements.items():
            if not got.ok:
                print(f"{model:<13} {m:>3} {name:<18} failed: {got.failure} {got.reason}", flush=True)
        single = min((f"single {d}" for d in names if f"single {d}" in step), key=step.get)
        bound = lower_bound(graph, names, cost, training, pipeline).value
        for name, seconds in step.items():
            row = {"model": model, "micro_batches": m, "placement": name, "objective": objective,
                   "step_s": seconds, "throughput_per_s": m / seconds, "rounds": result.rounds, "bound_s": bound,
                   "vs_best_single": _speedup(result, name, single),
                   "vs_whole_machine": _speedup(result, name, "whole machine"),
                   "vs_pipeline_dp": _speedup(result, name, "pipeline_dp") if "pipeline_dp" in step else None}
            if name in chosen:
                assign = [names.index(chosen[name].nodes[n]) for n in graph.nodes]
                simulated = sim.simulator.simulate(assign)
                p = len(set(assign))
                row.update(simulated_s=simulated.step_time, bubble=sim.simulator.bubble(assign, simulated.step_time),
                           textbook_bubble=(p - 1) / (m + p - 1))
            rows.append(row)
            print_row(row)
    return rows


def simulated_table(models: list[str], micro_batches: list[int], samples: int | None, objective: str,
                    schedule: str, small: bool, search: bool = False) -> int:
    """Each placement's simulated pipelined step, and pipeline_dp's over it (above 1: faster than
    pipeline_dp). Exact figures: the simulator is deterministic."""
    devices = parse_devices(DEVICES)
    names = [d.name for d in devices]
    training = TrainingSpec() if objective == "training" else None
    print(f"# the profiled simulator; devices {DEVICES}; {objective}; learner: {samples} simulated samples")
    print(f"{'model':<13} {'M':>3} {'placement':<18} {'sim ms':>9} {'pipeline_dp / it':>16} {'bound ms':>9}")
    for model in models:
        graph = zoo_graph(model, **(SMALL.get(model, {}) if small else {}))
        cost = profiled_cost_model(graph, devices, training=training)
        for m in micro_batches:
            pipeline = Pipeline(m, schedule)
            sim = SimulatedMeasurer(graph, names, cost, training=training, pipeline=pipeline)
            chosen = placements(graph, names, cost, pipeline, training, samples)
            steps = {name: sim.measure(p).step_time for name, p in chosen.items()}
            bound = lower_bound(graph, names, cost, training, pipeline).value
            for name, seconds in steps.items():
                print(f"{model:<13} {m:>3} {name:<18} {seconds * 1e3:9.2f} {steps['pipeline_dp'] / seconds:16.3f} "
                      f"{bound * 1e3:9.2f}", flush=True)
            if search:
                found, moves = local_search(graph, names, sim, chosen["pipeline_dp"])
                print(f"{model:<13} {m:>3} {'local search':<18} {found * 1e3:9.2f} {steps['pipeline_dp'] / found:16.3f} "
                      f"{bound * 1e3:9.2f}  ({moves} improving moves of whole groups from pipeline_dp)", flush=True)
    return 0


def local_search(graph, names, sim, start: Placement, max_sweeps: int = 5) -> tuple[float, int]:
    """The simulated step of a first-improvement local search from `start`: every group of the
    learner's grouping in turn is moved whole to each other device, a move kept when it makes
    the step faster; repeated until a sweep keeps none. A check of how far pipeline_dp is from what
    placements of whole groups can reach: it shows why the learner cannot beat it where it does not."""
    import numpy as np

    from placer.graph.grouping import group_graph

    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    groups = [[index[n] for n in g] for g in group_graph(graph, None, len(names)).groups]
    assign = np.asarray([names.index(start.nodes[n]) for n in nodes])
    best, moves = sim.simulator.simulate(assign).step_time, 0
    for _ in range(max_sweeps):
        kept = 0
        for members in groups:
            for d in range(len(names)):
                trial = assign.copy()
                trial[members] = d
                if (trial == assign).all():
                    continue
                t = sim.simulator.simulate(trial).step_time
                if t < best * (1 - 1e-6):
                    best, assign, kept = t, trial, kept + 1
        moves += kept
        if not kept:
            break
    return best, moves


def _speedup(result, name: str, reference: str) -> dict | None:
    """`reference`'s time over `name`'s, paired over the rounds, with its interval and verdict."""
    ratio = result.ratio(reference, name)
    return None if ratio is None else {**ratio.to_dict(), **verdict_record(ratio)}


def _cell(speedup: dict | None) -> str:
    """'1.72x [1.70, 1.74]', with ' ~' when tied with 1, ' ?' when not resolved."""
    if speedup is None:
        return "-"
    tied = {TIED: " ~", NOT_RESOLVED: " ?"}.get(speedup["verdict"], "")
    return format_ratio(speedup["value"], speedup["low"], speedup["high"]) + tied


def print_row(r: dict) -> None:
    sim = (f"{r['simulated_s'] * 1e3:9.2f} {r['bubble']:6.3f} {r['textbook_bubble']:6.3f}" if "simulated_s" in r
           else f"{'-':>9} {'-':>6} {'-':>6}")
    print(f"{r['model']:<13} {r['micro_batches']:>3} {r['placement']:<18} {r['step_s'] * 1e3:9.2f} "
          f"{r['throughput_per_s']:8.2f} {_cell(r['vs_best_single']):>22} {_cell(r['vs_whole_machine']):>22} "
          f"{_cell(r['vs_pipeline_dp']):>22}  {sim}",
          flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and learning samples (the README table)")
    parser.add_argument("--models", nargs="+", default=["resnet50", "transformer", "inception_v3"])
    parser.add_argument("--micro-batches", nargs="+", type=int, default=[1, 4, 8])
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 10; --quick 6; at least 6)")
    parser.add_argument("--samples", type=int, default=None,
                        help="simulated samples the learner trains for (default 2000; --quick 500)")
    parser.add_argument("--no-learn", action="store_true", help="leave the learned placement out")
    parser.add_argument("--objective", choices=("inference", "training"), default="inference")
    parser.add_argument("--schedule", choices=("1f1b", "gpipe"), default="1f1b")
    parser.add_argument("--small", action="store_true", help="small model options: checks the script runs")
    parser.add_argument("--simulated", action="store_true",
                        help="the profiled simulator only: each placement's simulated step against pipeline_dp's")
    parser.add_argument("--search", action="store_true",
                        help="with --simulated: also a local search over whole groups from pipeline_dp's placement")
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = parser.parse_args()
    samples = None if args.no_learn else (args.samples or (500 if args.quick else 2000))
    if args.simulated:
        return simulated_table(args.models, args.micro_batches, samples, args.objective, args.schedule, args.small,
                               args.search)
    rounds = max(6, args.rounds or (6 if args.quick else 10))   # 6: the fewest a 95% interval needs
    print(f"# {machine_note()}; devices {DEVICES}; {args.objective}"
          + (f", {args.schedule}" if args.objective == "training" else "") + f"; {rounds} interleaved rounds")
    print(f"{'model':<13} {'M':>3} {'placement':<18} {'step ms':>9} {'mb/s':>8} {'x best 1 device':>22} "
          f"{'x whole machine':>22} {'x pipeline_dp':>22}  "
          f"{'sim ms':>9} {'bubble':>6} {'(p-1)/(m+p-1)':>6}")
    rows = []
    for model in args.models:
        rows += run_model(model, args.micro_batches, rounds, samples, args.objective, args.schedule, args.small)
    if args.out:
        save_json(args.out, {"machine": machine_note(), "devices": DEVICES, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
