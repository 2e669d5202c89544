"""Plans against placements, simulated: the zoo's models' inference steps (or, with `--objective
training`, their training steps: SGD on a mean-squared loss) at the paper's batches on the
catalogue's clusters. For each pair, the placers' placements (the fastest of them is the
"best placement"), each plan row users run (`placer.evaluate.plan_rows`: DDP, ...), placer's
local search over plans (`plan_search`), FlexFlow's MCMC (`mcmc`) and REINFORCE over plans
(`plan_reinforce`) at the same budget of simulated plans, each from the fastest of the rows before
them. Printed per pair: each row's step time, and placer's plan against the best placement and against DDP (speed-ups: their step time
over the plan's).

Every figure is the roofline cost model's on the cluster's datasheet figures (`placer.plans.pricing`):
exact, so no interval.

    python benchmarks/plans.py                         # 5 models x 6 clusters (long: tens of minutes)
    python benchmarks/plans.py --quick                 # transformer at batch 16 on paper-2xk40, few samples
    python benchmarks/plans.py --models nmt --clusters 4xa100-nvlink --plan-samples 400 --json out.json
    python benchmarks/plans.py --objective training --models inception_v3 nmt --clusters paper-4xk40 4xa100-nvlink
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import save_json, zoo_graph  # noqa: E402
from placer.devices import as_devices  # noqa: E402
from placer.evaluate.plan_rows import PLANS, plan_rows  # noqa: E402
from placer.hardware import load_cluster  # noqa: E402
from placer.jobs.compare import simulated_comparison  # noqa: E402
from placer.plans.data_parallel import NAME as DATA_PARALLEL  # noqa: E402
from placer.costmodel.lower_bound import plan_lower_bound  # noqa: E402
from placer.costmodel.roofline import RooflineCostModel  # noqa: E402
from placer.jobs.compare import plan_searches  # noqa: E402
from placer.jobs.settings import StepSettings  # noqa: E402
from placer.plans.search import NAME as PLAN_SEARCH, SAMPLES  # noqa: E402

SEARCHES = plan_searches()   # plan_search, mcmc and plan_reinforce
BATCH = {"inception_v3": 32, "rnnlm": 64, "nmt": 64, "resnet50": 32, "transformer": 64}   # the paper's section 4
CLUSTERS = ["paper-2xk40", "paper-4xk40", "cpu-fast-slow-gpu", "v100-k40-mix", "4xa100-nvlink", "8xh100-nvlink"]
# the placers whose placements the plans start from: every one but the slow searches' long budgets
PLACERS = ("single", "round_robin", "metis", "m_topo", "m_etf", "m_sct", "memory_greedy", "heft", "expert",
           "local_search")


def one(model: str, batch: int, cluster_name: str, samples: int, plan_samples: int, seed: int,
        objective: str = "inference", searches: dict = SEARCHES) -> dict:
    """Every row of one (model, cluster) pair, simulated, on an inference or a training step."""
    graph = zoo_graph(model, batch=batch)
    cluster = load_cluster(cluster_name)
    devices = as_devices(cluster.device_specs())
    names = [d.name for d in devices]
    training = StepSettings(objective=objective).training_spec(graph)
    comparison = simulated_comparison(graph, devices, cluster, list(PLACERS), None, samples, seed, plans=(),
                                      training=training)
    placed = {r.name: r for r in comparison.rows if r.step_time is not None and r.placement is not None}
    start = time.perf_counter()
    names_of_plans = [*(p for p in PLANS if p not in SEARCHES), *searches]
    rows, notes = plan_rows(graph, cluster, names, names_of_plans, placements={n: r.placement for n, r in placed.items()},
                            samples=plan_samples, seed=seed, searches=searches, training=training)
    plans_s = time.perf_counter() - start
    caps = {d.name: d.model.memory_bytes for d in cluster.devices}
    bound_ms = plan_lower_bound(graph, names, RooflineCostModel(cluster, graph), training, caps=caps).value * 1e3
    best = min(placed, key=lambda n: placed[n].step_time)
    ms = {r.name: (r.step_time * 1e3 if r.step_time is not None else None) for r in rows}
    failures = {r.name: r.measurement.reason for r in rows if r.step_time is None and r.measurement is not None}
    plan_ms, best_ms = ms.get(PLAN_SEARCH), placed[best].step_time * 1e3
    ddp_ms = ms.get(DATA_PARALLEL)
    # what placer's plan starts from: every placement and every plan users run (not the searches)
    fastest_ms = min([best_ms] + [v for n, v in ms.items() if v is not None and n not in SEARCHES])
    searched = {r.name: r.note for r in rows if r.name in SEARCHES}
    return {"model": model, "batch": batch, "cluster": cluster_name, "objective": objective, "samples": samples, "plan_samples": plan_samples,
            "best_placement": best, "best_placement_ms": best_ms, "plan_rows_ms": ms, "failures": failures,
            "notes": notes, "search_notes": searched, "plans_s": plans_s,
            "plan_vs_best_placement": best_ms / plan_ms if plan_ms else None,
            "plan_vs_ddp": ddp_ms / plan_ms if plan_ms and ddp_ms else None,
            "plan_vs_fastest": fastest_ms / plan_ms if plan_ms else None,
            "plan_bound_ms": bound_ms, "plan_over_bound": plan_ms / bound_ms if plan_ms else None}


def _ms(value: float | None) -> str:
    return f"{value:.3f} ms" if value is not None else "-"


def _ratio(value: float | None) -> str:
    return f"{value:.3f}x" if value is not None else "-"


def show(r: dict) -> None:
    print(f"\n{r['model']} (batch {r['batch']}, {r['objective']} step) on {r['cluster']}")
    print(f"  best placement  {r['best_placement']:<16} {_ms(r['best_placement_ms'])}")
    for name, value in r["plan_rows_ms"].items():
        shown = _ms(value) if value is not None else "fails: " + r["failures"].get(name, "?")
        print(f"  plan row        {name:<16} {shown}")
    for name, note in r["search_notes"].items():
        print(f"    {name}: {note}")
    for note in r["notes"]:
        print(f"    note: {note}")
    print(f"  placer's plan vs best placement {_ratio(r['plan_vs_best_placement'])}, vs DDP {_ratio(r['plan_vs_ddp'])}, "
          f"vs the fastest other row {_ratio(r['plan_vs_fastest'])} (speed-ups; plans searched in {r['plans_s']:.1f} s); "
          f"plan / the bound over plans ({_ms(r['plan_bound_ms'])}) {_ratio(r['plan_over_bound'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(BATCH), choices=list(BATCH))
    parser.add_argument("--clusters", nargs="+", default=CLUSTERS, help="catalogue names or TOML files")
    parser.add_argument("--batch", type=int, default=None, help="one batch for every model (default: the paper's)")
    parser.add_argument("--samples", type=int, default=1000, help="local search's simulated placements")
    parser.add_argument("--plan-samples", type=int, default=SAMPLES,
                        help="simulated plans of each search (plan_search, mcmc, plan_reinforce)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--objective", choices=["inference", "training"], default="inference",
                        help="the step simulated: inference (default) or training (SGD, mean-squared loss)")
    parser.add_argument("--quick", action="store_true", help="transformer at batch 16 on paper-2xk40, 30 plans")
    parser.add_argument("--searches", nargs="+", default=list(SEARCHES), choices=list(SEARCHES),
                        help="the searches over plans run (default: all; plan_search alone for long budgets)")
    parser.add_argument("--json", default=None, help="write every row here")
    args = parser.parse_args()
    if args.quick:
        args.models, args.clusters, args.batch, args.samples, args.plan_samples = \
            ["transformer"], ["paper-2xk40"], 16, 100, 30
    results = []
    for model in args.models:
        for cluster in args.clusters:
            results.append(one(model, args.batch or BATCH[model], cluster, args.samples, args.plan_samples, args.seed,
                               args.objective, {k: v for k, v in SEARCHES.items() if k in args.searches}))
            show(results[-1])
    ratios = [r["plan_vs_best_placement"] for r in results if r["plan_vs_best_placement"]]
    fastest = [r["plan_vs_fastest"] for r in results if r["plan_vs_fastest"]]
    print(f"\nplacer's plan at least 10% faster than the best placement on {sum(x >= 1.1 for x in ratios)} of "
          f"{len(results)} pairs, than the fastest other row on {sum(x >= 1.1 for x in fastest)}, slower than it on "
          f"{sum(x < 1 for x in fastest)}; simulated (roofline, datasheet figures): exact, no intervals")
    no_room = [r for r in results if r["plan_vs_fastest"] and r["plan_vs_fastest"] < 1.1]
    print(f"of the {len(no_room)} pairs where it is not 10% faster than every other row, the bound over plans leaves "
          f"no 10% to find on {sum(r['plan_over_bound'] < 1.1 for r in no_room)} (plan / bound under 1.1)")
    if args.json:
        save_json(args.json, results)


if __name__ == "__main__":
    main()
