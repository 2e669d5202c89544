"""Simulated placements per second: the batched simulator (`placer.costmodel.batch_simulator`)
against the one-placement simulator, on a zoo model and a described cluster (roofline costs).

Learning across a corpus needs many simulated placements per second (target: at least 10,000 on
Inception-v3 with 4 GPUs). Three ways of simulating the same uniformly random placements are timed
in interleaved rounds: one at a time (`Simulator.simulate`), batched with every figure
(`simulate_batch`: step times, peaks and failures), and batched as a search or the learner's
reward uses it (`peaks=False`: step times and failures, out of memory included, exactly; the
peaks only where a cap could be reached). Before timing, the batched results are checked equal to
the one-at-a-time ones (==, not close). Wall-clock rates are medians over the rounds with their 95%
intervals; on a shared machine the process's CPU time is printed too.

    python benchmarks/simulator_rate.py                          # inception_v3 on paper-4xk40
    python benchmarks/simulator_rate.py --model nmt --cluster paper-2xk40 --objective training
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import machine_note, measure_callables, save_json, zoo_graph  # noqa: E402
from placer.costmodel.batch_simulator import simulate_batch  # noqa: E402
from placer.costmodel.roofline import cluster_measurer  # noqa: E402
from placer.hardware import load_cluster  # noqa: E402
from placer.program.training import TrainingSpec  # noqa: E402

TARGET = 10_000   # placements per second (issue 29)


def check_identical(sim, rows: np.ndarray) -> None:
    """The batched pass gives each row exactly what the one-placement pass gives, or the benchmark stops."""
    batch = simulate_batch(sim, rows)
    for k, row in enumerate(rows.tolist()):
        one = sim.simulate(row)
        if (one.step_time, one.peak_memory, one.failure) != (batch.step_time[k], batch.peak_memory[k].tolist(),
                                                              batch.failure[k]):
            raise SystemExit(f"placement {k}: batched {batch.step_time[k]}, {batch.failure[k]} differs from "
                             f"one at a time {one.step_time}, {one.failure}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--model", default="inception_v3", help="zoo model (default inception_v3)")
    parser.add_argument("--cluster", default="paper-4xk40", help="catalogue name or TOML file (default paper-4xk40)")
    parser.add_argument("--objective", choices=("inference", "training"), default="inference")
    parser.add_argument("--placements", type=int, default=4096, help="random placements per batched call")
    parser.add_argument("--one-at-a-time", type=int, default=100, help="placements simulated one by one per round")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (at least 6)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args()
    if args.rounds < 6 or args.placements < 1 or args.one_at_a_time < 1:
        parser.error("--rounds must be at least 6 (a 95%% interval needs them); "
                     "--placements and --one-at-a-time at least 1")

    graph = zoo_graph(args.model)
    cluster = load_cluster(args.cluster)
    training = TrainingSpec() if args.objective == "training" else None
    sim = cluster_measurer(cluster, graph, training=training).simulator
    rows = np.random.default_rng(args.seed).integers(0, len(sim.devices), size=(args.placements, len(graph.nodes)))
    few = rows[:args.one_at_a_time]
    print(f"{args.model} ({len(graph.nodes)} nodes, {len(sim.steps)} simulated steps) on {cluster.name} "
          f"({len(sim.devices)} devices: {', '.join(sim.devices)}), roofline costs, {args.objective} step; "
          f"{machine_note()}")
    check_identical(sim, few)
    print(f"batched = one at a time on {len(few)} random placements (step times, peaks, failures: equal)")

    counts = {"one at a time": len(few), "batched": len(rows), "batched, no peaks": len(rows)}
    cpu: dict[str, list[float]] = {name: [] for name in counts}

    def timed(name, fn):
        def run():
            start = time.process_time()
            fn()
            cpu[name].append(time.process_time() - start)
        return run

    runs = {"one at a time": timed("one at a time", lambda: [sim.simulate(row) for row in few.tolist()]),
            "batched": timed("batched", lambda: simulate_batch(sim, rows)),
            "batched, no peaks": timed("batched, no peaks", lambda: simulate_batch(sim, rows, peaks=False))}
    result = measure_callables(runs, args.rounds, reference="one at a time", seed=args.seed)

    print(f"{'':20s}{'placements/s':>13s}{'95% interval':>24s}{'per placement':>15s}{'CPU: placements/s':>19s}")
    figures = {}
    for name, count in counts.items():
        wall = result.interval(name)
        per_cpu = statistics.median(cpu[name][-args.rounds:]) / count
        rate, low, high = count / wall.value, count / wall.high, count / wall.low
        figures[name] = {"placements_per_s": rate, "low": low, "high": high, "cpu_placements_per_s": 1 / per_cpu}
        interval = f"[{low:,.0f}, {high:,.0f}]"
        print(f"{name:20s}{rate:>13,.0f}{interval:>24s}{wall.value / count * 1e6:>12.1f} us{1 / per_cpu:>19,.0f}")
    best = figures["batched, no peaks"]
    verdict = "met" if best["low"] >= TARGET else "not met" if best["high"] < TARGET else "not settled"
    print(f"target: at least {TARGET:,} placements/s, batched (no peaks): {verdict} on wall time "
          f"({best['low']:,.0f}-{best['high']:,.0f}), {best['cpu_placements_per_s']:,.0f}/s of CPU time; "
          f"{best['placements_per_s'] / figures['one at a time']['placements_per_s']:.1f}x one at a time")
    if args.json:
        save_json(args.json, {"model": args.model, "cluster": cluster.name, "devices": sim.devices,
                              "objective": args.objective, "rounds": args.rounds, "machine": machine_note(),
                              "figures": figures})


if __name__ == "__main__":
    main()
