"""Simulated plans per second: many plans priced together (`placer.plans.batch_pricing`) against
one at a time (`pricing.simulate_plan`: lower, build the simulator, simulate), on a zoo model and a
described cluster (roofline costs), inference steps.

Two sets of plans, since what batching gains depends on how many plans share their lowering:

- `moved`: DDP over the GPUs for the first third of the ops (in graph order), the ops beside it as they lie,
  every other op whole on a random device: what a search meets moving ops beside a split block.
  They share one lowering (target: 10,000 plans a second on Inception-v3 over 4 GPUs).
- `searched`: from DDP or FSDP, random groups set to random configs (whole, split by batch or by
  weights over runs of GPUs) and random ops moved, as a search draws them: most lower alone, so
  batching gains little.

Before timing, every batched figure of the one-at-a-time sample is checked equal (==). Each batched
call starts from nothing (its lowerings included). Wall-clock rates are medians over interleaved
rounds with 95% intervals.

    python benchmarks/plan_rate.py                                  # inception_v3 b32 on 4xa100-nvlink
    python benchmarks/plan_rate.py --model nmt --cluster paper-4xk40 --set searched
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import machine_note, measure_callables, save_json, zoo_graph  # noqa: E402
from placer.hardware import load_cluster  # noqa: E402
from placer.plans.batch_pricing import PlanBatchSimulator  # noqa: E402
from placer.plans.data_parallel import data_parallel  # noqa: E402
from placer.plans.fsdp import fsdp  # noqa: E402
from placer.plans.plan import OpPlan, Plan  # noqa: E402
from placer.plans.pricing import simulate_plan  # noqa: E402
from placer.plans.search import group_units, unit_grouping  # noqa: E402
from placer.plans.space import configs, replan_groups  # noqa: E402

TARGET = 10_000   # plans per second (issue 40)


def moved(graph, cluster, n: int, rng) -> list[Plan]:
    devices, names = [d.name for d in cluster.devices], list(graph.nodes)
    ddp = data_parallel(graph, [d for d in devices if d.startswith("cuda")] or devices)   # DDP over the GPUs
    base = Plan(devices, {m: ddp.ops[m] if k < len(names) // 3 else OpPlan((devices[0],))
                          for k, m in enumerate(names)}, graph.sha256)
    pinned = {names[i] for i, _ in PlanBatchSimulator(graph, cluster).class_key(base)[3]}   # the split and beside it
    return [Plan(devices, {m: op if m in pinned else OpPlan((devices[rng.integers(len(devices))],))
                           for m, op in base.ops.items()}, graph.sha256) for _ in range(n)]


def searched(graph, cluster, n: int, rng) -> list[Plan]:
    devices = [d.name for d in cluster.devices]
    members = group_units(unit_grouping(graph, data_parallel(graph, devices), 16))
    options = configs(devices)
    plans = []
    for k in range(n):
        start = (data_parallel if k % 2 else fsdp)(graph, devices)
        plan = replan_groups(graph, start, members, options, rng.integers(0, 2 * len(options), size=len(members)))
        ops = dict(plan.ops)
        for name in rng.choice(list(graph.nodes), size=8):
            ops[name] = OpPlan((devices[rng.integers(len(devices))],))
        plans.append(Plan(plan.devices, ops, plan.graph_sha256, extra=plan.extra))
    return plans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--model", default="inception_v3", help="zoo model (default inception_v3)")
    parser.add_argument("--batch", type=int, default=32, help="its batch (default 32)")
    parser.add_argument("--cluster", default="4xa100-nvlink", help="catalogue name or TOML file (default 4xa100-nvlink)")
    parser.add_argument("--set", choices=("moved", "searched"), default="moved", help="which plans (see above)")
    parser.add_argument("--plans", type=int, default=20_000, help="plans per batched call")
    parser.add_argument("--one-at-a-time", type=int, default=60, help="plans simulated one by one per round")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (at least 6)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args()
    if args.rounds < 6 or args.plans < args.one_at_a_time or args.one_at_a_time < 1:
        parser.error("--rounds must be at least 6; --one-at-a-time at least 1 and at most --plans")

    graph = zoo_graph(args.model, batch=args.batch)
    cluster = load_cluster(args.cluster)
    devices = [d.name for d in cluster.devices]
    rng = np.random.default_rng(args.seed)
    plans = (moved if args.set == "moved" else searched)(graph, cluster, args.plans, rng)
    few = plans[:args.one_at_a_time]
    print(f"{args.model} b{args.batch} ({len(graph.nodes)} nodes) on {cluster.name} ({len(devices)} devices), "
          f"roofline costs, inference step, plans '{args.set}'; {machine_note()}")
    alone = [simulate_plan(graph, p, cluster) for p in few]
    alone_ms = np.asarray([m.step_time if m.ok else math.inf for m in alone])
    sim = PlanBatchSimulator(graph, cluster)
    batched_ms = sim.step_times(plans)
    if not (batched_ms[:len(few)] == alone_ms).all():
        raise SystemExit("the batched step times differ from one at a time")
    classes = sim.lowered
    print(f"batched = one at a time on {len(few)} plans (step times and failures equal); {len(plans)} plans "
          f"lower to {classes} graph(s); {int(np.isinf(batched_ms).sum())} fail")

    counts = {"one at a time": len(few), "batched": len(plans)}
    runs = {"one at a time": lambda: [simulate_plan(graph, p, cluster) for p in few],
            "batched": lambda: PlanBatchSimulator(graph, cluster).step_times(plans)}
    result = measure_callables(runs, args.rounds, reference="one at a time", seed=args.seed)
    print(f"{'':16s}{'plans/s':>10s}{'95% interval':>24s}{'per plan':>12s}")
    figures = {}
    for name, count in counts.items():
        wall = result.interval(name)
        rate, low, high = count / wall.value, count / wall.high, count / wall.low
        figures[name] = {"plans_per_s": rate, "low": low, "high": high}
        print(f"{name:16s}{rate:>10,.0f}{f'[{low:,.0f}, {high:,.0f}]':>24s}{wall.value / count * 1e6:>9.0f} us")
    best = figures["batched"]
    verdict = "met" if best["low"] >= TARGET else "not met" if best["high"] < TARGET else "not settled"
    print(f"target: at least {TARGET:,} plans/s batched: {verdict} ({best['low']:,.0f}-{best['high']:,.0f}); "
          f"{best['plans_per_s'] / figures['one at a time']['plans_per_s']:.0f}x one at a time")
    if args.json:
        save_json(args.json, {"model": args.model, "batch": args.batch, "cluster": cluster.name, "set": args.set,
                              "plans": len(plans), "lowerings": classes, "rounds": args.rounds,
                              "machine": machine_note(), "figures": figures})


if __name__ == "__main__":
    main()
