"""Parallelism: Inception-v3 on two single-thread virtual CPU devices, a branch-parallel placement
vs. one single-thread device, timed side by side (interleaved) in one run.

The placement: every Concat's input branches (the nodes only that branch needs) are dealt to the
two devices by profiled time, largest first to the less loaded device; the rest stays on cpu:0.
The script also prints what bounds the speedup: the same placement simulated with the profiled
node times and free hand-overs, and the bound of any two-device placement (critical path, half
the work).

    python benchmarks/parallel_inception.py [--quick] [--rounds R] [--model NAME]
"""

from __future__ import annotations

import argparse
import sys

import networkx as nx

from _bench import machine_note, measure_callables, zoo_graph
from placer.graph.opgraph import OpGraph
from placer.engines.torch.executor import PlacedExecutor
from placer.measure.intervals import format_bounds, format_ratio
from placer.graph.feeds import random_feeds
from placer.measure.measurer import MeasureProtocol
from placer.kernels.prepare import prepare
from placer.costmodel.profiler import profile_graph
from placer.placement import Placement

DEVICES = ["cpu:0[threads=1]", "cpu:1[threads=1]"]


def branch_parallel(graph: OpGraph, cost: dict[str, float], devices: list[str]
                    ) -> tuple[dict[str, str], set[str]]:
    """Deal each Concat's exclusive input branches to devices by cost (LPT), outer blocks last.
    Returns the assignment and the nodes that belong to some branch."""
    nodes = {n: devices[0] for n in graph.nodes}
    in_branch: set[str] = set()
    dag = graph.dag
    for node in graph.nodes.values():
        if node.op_type != "Concat":
            continue
        heads = [graph.producer[t] for t in node.inputs if t in graph.producer]
        if len(set(heads)) < 2:
            continue
        reach = {h: nx.ancestors(dag, h) | {h} for h in dict.fromkeys(heads)}
        branches = []
        for h, mine in reach.items():
            others = set().union(*(r for k, r in reach.items() if k != h))
            branches.append(mine - others)
        load = dict.fromkeys(devices, 0.0)
        for branch in sorted(branches, key=lambda b: -sum(cost.get(n, 0.0) for n in b)):
            target = min(devices, key=lambda d: load[d])
            load[target] += sum(cost.get(n, 0.0) for n in branch)
            for n in branch:
                nodes[n] = target
            in_branch |= branch
    return nodes, in_branch


def simulate(graph: OpGraph, cost: dict[str, float], nodes: dict[str, str]) -> float:
    """Makespan of the placement with each device running its nodes in topological order."""
    free: dict[str, float] = {}
    done: dict[str, float] = {}
    for name in graph.nodes:
        dev = nodes[name]
        ready = max((done[p] for p in graph.dag.predecessors(name)), default=0.0)
        done[name] = max(ready, free.get(dev, 0.0)) + cost.get(name, 0.0)
        free[dev] = done[name]
    return max(done.values())


def critical_path(graph: OpGraph, cost: dict[str, float]) -> float:
    finish: dict[str, float] = {}
    for name in graph.nodes:
        finish[name] = max((finish[p] for p in graph.dag.predecessors(name)), default=0.0) + cost.get(name, 0.0)
    return max(finish.values())


def machine_parallelism(n: int = 30) -> float:
    """What this machine gives right now: two threads each running single-thread convolutions vs
    one thread doing all of them (the ceiling of any placement on two 1-thread devices)."""
    import threading
    import time

    import torch
    import torch.nn.functional as F

    x, w = torch.randn(1, 64, 56, 56), torch.randn(64, 64, 3, 3)

    def work(count: int) -> None:
        torch.set_num_threads(1)
        for _ in range(count):
            F.conv2d(x, w, padding=1)

    def timed(threads: list[threading.Thread]) -> float:
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - start

    timed([threading.Thread(target=work, args=(3,))])   # warm up
    one = timed([threading.Thread(target=work, args=(2 * n,))])
    two = timed([threading.Thread(target=work, args=(n,)) for _ in range(2)])
    return one / two


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (at least 6)")
    parser.add_argument("--model", default="inception_v3", help="zoo model (default inception_v3)")
    args = parser.parse_args()
    rounds = args.rounds or (6 if args.quick else 16)   # 6: the fewest a 95% interval needs
    print(f"branch parallelism on {args.model}, 2 x 1-thread virtual CPU devices vs 1 x 1-thread; "
          f"{rounds} interleaved rounds; {machine_note()}")
    graph = zoo_graph(args.model)
    prepared = prepare(graph)
    feeds = random_feeds(graph, seed=0)
    profile = profile_graph(graph, DEVICES[:1], prepared=prepared, feeds=feeds,
                            protocol=MeasureProtocol(warmup=1, repeats=1 if args.quick else 3))
    cost = {n: per["cpu:0"] for n, per in profile.op_times.items()}
    names = ["cpu:0", "cpu:1"]
    nodes, in_branch = branch_parallel(graph, cost, names)
    serial = sum(c for n, c in cost.items() if n not in in_branch)
    split = Placement(names, nodes, graph.sha256)
    single = Placement.single_device(list(graph.nodes), "cpu:0", graph.sha256, devices=names)
    with PlacedExecutor(graph, single, DEVICES, prepared=prepared) as one, \
            PlacedExecutor(graph, split, DEVICES, prepared=prepared) as two:
        result = measure_callables({"one": lambda: one.run(feeds), "two": lambda: two.run(feeds)}, rounds,
                                   reference="one")
        crossings = len(two.schedule.crossings)
    t1, t2 = result.interval("one").value, result.interval("two").value
    total = sum(cost.values())
    sim = simulate(graph, cost, nodes)
    bound = total / max(total / 2, critical_path(graph, cost))
    counts = split.device_counts()
    print(f"placement: {counts['cpu:0']} nodes on cpu:0, {counts['cpu:1']} on cpu:1, {crossings} crossing tensors; "
          f"profiled work {total * 1e3:.1f} ms, on cpu:1 {sum(cost[n] for n, d in nodes.items() if d == 'cpu:1') * 1e3:.1f} ms")
    print(f"serial work outside any branch (stem, joins, head): {serial * 1e3:.1f} ms "
          f"({100 * serial / total:.0f}% of the work)")
    ratio = result.ratio("two", "one")   # time of two over one, per round
    print(f"one device   {t1 * 1e3:9.2f} ms (median)")
    print(f"two devices  {t2 * 1e3:9.2f} ms (median)")
    print(f"speedup      {format_ratio(1 / ratio.value, digits=3):>10s} measured "
          f"{format_bounds(1 / ratio.high, 1 / ratio.low, digits=3)} "
          f"(one over two, the median of the per-round ratios and its 95% interval)")
    print(f"             {total / sim:9.3f}x this placement simulated with profiled node times, free hand-overs")
    print(f"             {bound:9.3f}x bound of any 2-device placement (work / max(work/2, critical path))")
    print(f"             {machine_parallelism():9.3f}x two 1-thread conv loops vs one, on this machine now")
    return 0


if __name__ == "__main__":
    sys.exit(main())
