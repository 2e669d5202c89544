"""Samples per minute on 1, 2 and 4 Ray workers (`placer train --workers N`), as ratios to one
worker measured in the same run.

Default: a measurer that takes a fixed time per placement (a sleep), so that what the ratios lose
against N is the machinery's overhead: Ray's calls, sending placements, gathering results
(target: 4 workers at least 3.5x one). The pools run side by side, interleaved round by round
(`placer.measure.rounds`).

--real: real measurement of a zoo model on workers of two 1-thread virtual CPU devices each
(--devices), every worker pinned to its own cores (2 cores per worker: 8 for 4 workers), one pool
after the other; prints samples per minute and whether the workers' single-device step times agree.

    python benchmarks/workers.py [--quick] [--sleep-ms 50] [--batch 32] [--rounds 6] [--workers 1 2 4]
    python benchmarks/workers.py --real [--model inception_v3] [--batch 32] [--devices "cpu:0[threads=1]"]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from _bench import machine_note, measure_callables
from placer.measure.measurement import Measurement
from placer.placement import Placement
from placer.workers import RayMeasurer, WorkerNeeds, WorkerSpec

DEVICES = "cpu:0[threads=1],cpu:1[threads=1]"


class SleepingMeasurer:
    """Takes `seconds` per placement and measures nothing: the cost of measuring, without its noise."""

    def __init__(self, devices: list[str], seconds: float) -> None:
        self.devices, self.seconds = devices, seconds

    def measure(self, placement: Placement) -> Measurement:
        time.sleep(self.seconds)
        return Measurement(ok=True, step_time=self.seconds, times=[self.seconds])


@dataclass
class SleepSpec(WorkerSpec):
    seconds: float = 0.05

    def needs(self) -> WorkerNeeds:
        return WorkerNeeds()        # a sleep needs no core of its own

    def describe(self) -> dict:
        return {"measurer": "sleep"}

    def build(self) -> SleepingMeasurer:
        return SleepingMeasurer(self.device_names, self.seconds)


def random_placements(nodes: list[str], devices: list[str], n: int, seed: int = 0) -> list[Placement]:
    rng = np.random.default_rng(seed)
    return [Placement(devices, {v: devices[rng.integers(len(devices))] for v in nodes}) for _ in range(n)]


def per_minute(batch: int, seconds: float) -> float:
    return batch / seconds * 60


def overhead(args: argparse.Namespace) -> None:
    """The pools side by side: each round, every pool measures the same batch in turn."""
    names = ["cpu:0", "cpu:1"]
    # A placement as large as a big model's (1000 nodes), so that sending it is part of the cost.
    batch = random_placements([f"node{i}" for i in range(1000)], names, args.batch)
    pools = {n: RayMeasurer(SleepSpec(names, seconds=args.sleep_ms / 1e3), workers=n) for n in args.workers}
    for n, pool in pools.items():       # warm-up: the first call of each worker
        pool.measure_many(batch[:n])
    result = measure_callables({str(n): lambda pool=pool: pool.measure_many(batch) for n, pool in pools.items()},
                               args.rounds, reference=str(args.workers[0]), warmup=0)
    ideal = per_minute(args.batch, args.batch * args.sleep_ms / 1e3)
    print(f"measurer: {args.sleep_ms:g} ms per placement; batches of {args.batch}; median of {args.rounds} "
          f"interleaved rounds; one worker at most {ideal:.0f} samples/min")
    first = args.workers[0]
    print(f"{'workers':>8} {'batch s':>9} {'samples/min':>12} {f'vs {first} worker(s)':>16} {'of ideal':>9}")
    for n in args.workers:
        t = result.interval(str(n)).value
        ratio = result.interval(str(first)).value / t
        print(f"{n:>8} {t:>9.3f} {per_minute(args.batch, t):>12.0f} {ratio:>15.2f}x {ratio * first / n:>8.0%}")
    for pool in pools.values():
        pool.close()


def real(args: argparse.Namespace) -> None:
    """Real measurement: one pool after the other (each pins its workers to the same first cores)."""
    from _bench import zoo_graph
    from placer.graph.grouping import group_graph
    from placer.measure.measurer import MeasureProtocol
    from placer.workers import RealSpec
    from placer.workers.launch import calibration_text

    from placer.devices import parse_devices

    graph = zoo_graph(args.model)
    devices = [str(d) for d in parse_devices(args.devices)]
    names = [d.split("[")[0] for d in devices]
    grouping = group_graph(graph, 32, len(names))
    rng = np.random.default_rng(0)
    batch = [grouping.expand(list(rng.integers(0, len(names), len(grouping))), names, graph.sha256)
             for _ in range(args.batch)]
    singles = {d: Placement.single_device(list(graph.nodes), d, graph.sha256, names) for d in names}
    protocol = MeasureProtocol(warmup=1, repeats=3)   # placer train's defaults
    print(f"{args.model}: {len(graph.nodes)} nodes; batches of {args.batch} random placements of {len(grouping)} "
          f"groups on {', '.join(devices)} per worker; warm-up {protocol.warmup}, {protocol.repeats} timed runs")
    rates = {}
    for n in args.workers:
        with RayMeasurer(RealSpec(devices, graph=graph, protocol=protocol), workers=n) as pool:
            pool.calibrate(singles)
            print(calibration_text(pool.report()))
            start = time.perf_counter()
            measured = pool.measure_many(batch)
            took = time.perf_counter() - start
            rates[n] = per_minute(args.batch, took)
            steps = [m.step_time * 1e3 for m in measured if m.ok]
            first = args.workers[0]
            print(f"{n} worker(s): {took:.1f} s, {rates[n]:.0f} samples/min "
                  f"({rates[n] / rates[first]:.2f}x {first} worker(s)); "
                  f"median step {np.median(steps):.1f} ms over {len(steps)} placements that ran")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", action="store_true", help="real measurement of a zoo model instead of a sleep")
    parser.add_argument("--model", default="inception_v3", help="zoo model for --real (default inception_v3)")
    parser.add_argument("--sleep-ms", type=float, default=50.0, help="time per placement of the sleeping measurer")
    parser.add_argument("--batch", type=int, default=32, help="placements per batch (an update's samples)")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (sleep mode; at least 6)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4], help="pool sizes (default 1 2 4)")
    parser.add_argument("--devices", default=DEVICES, help=f"--real: the devices of one worker (default {DEVICES})")
    parser.add_argument("--quick", action="store_true", help="a smaller batch (16) and the fewest rounds (6)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.batch = 6, min(args.batch, 16)   # 6: the fewest rounds a 95% interval needs
    print(machine_note())
    real(args) if args.real else overhead(args)


if __name__ == "__main__":
    main()
