"""What learning is worth: the policy's own placement against random search and the baselines.

On the profiled simulator (each op timed once on these devices, then deterministic), for each zoo
model, device count and seed, the learner trains to each sample budget in turn (one run, resumed
exactly from budget to budget) and the script prints, as ratios to the best baseline placer
under the same cost model (below 1 is faster):

  greedy   the policy's own placement (greedy decoding) at that budget: what it learned
  best     the best placement sampled so far (search, which random search also does)
  random   the best of as many uniformly random placements of the same groups (random search)
  bound    the lower bound on any placement (critical path and load)

and `greedy vs random` (random search / greedy: above 1.05 meets the 5% target) and the entropy
per group (at most 0.1 nats: converged), and samples per second of training to that budget
(everything included: policy updates, simulator, warm start, checkpoints). Devices are 1-thread virtual CPUs `cpu:K[threads=1]`.

    python benchmarks/learning.py --quick          # the README table: seed 0, 2 and 4 devices
    python benchmarks/learning.py                  # 5 models x {2, 4} devices x 3 seeds x {500, 2000, 8000}
    python benchmarks/learning.py --models inception_v3 --devices 2 --seeds 0 1 2
    python benchmarks/learning.py --throughput     # samples/s of the training loop on Inception-v3
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import save_json, zoo_graph  # noqa: E402

MODELS = ("inception_v3", "resnet50", "rnnlm", "nmt", "transformer")
QUICK_MODELS = ("inception_v3", "resnet50", "rnnlm")


def run_one(graph, n_devices: int, seed: int, budgets: list[int], cost_model: str) -> list[dict]:
    """Train to each budget in turn and score the policy, its samples and random search there."""
    from placer.graph.grouping import group_graph
    from placer.devices import parse_devices
    from placer.costmodel.lower_bound import lower_bound
    from placer.costmodel.simulator import AnalyticCostModel, SimulatedMeasurer
    from placer.placers.random_search import random_search_curve
    from placer.policy.hparams import Hyperparameters
    from placer.policy.trainer import train
    from placer.policy.warm_start import plan_warm_start

    devices = parse_devices(",".join(f"cpu:{i}[threads=1]" for i in range(n_devices)))
    names = [d.name for d in devices]
    if cost_model == "analytic":
        cost = AnalyticCostModel(names)
    else:
        from placer.costmodel.profile_cache import profiled_cost_model

        cost = profiled_cost_model(graph, devices)
    hp = Hyperparameters()
    warm = plan_warm_start(graph, names, cost, {}, group_graph(graph, None, n_devices), hp.warm_start, seed=seed)
    baseline = warm.simulated_step_time
    bound = lower_bound(graph, names, cost).value
    searched = random_search_curve(graph, names, cost, seed=seed, counts=budgets, grouping=warm.grouping)
    measurer = SimulatedMeasurer(graph, names, cost)
    rows = []
    with tempfile.TemporaryDirectory() as run_dir:
        started = time.perf_counter()
        for i, budget in enumerate(budgets):
            leg = time.perf_counter()
            s = train(graph, measurer, warm.grouping, run_dir, hp, samples=budget, seed=seed, resume=i > 0,
                      warm_start=warm).summary
            trained = s["samples"] - (rows[-1]["samples"] if rows else 0)
            greedy = s["greedy"]["step_time"]
            rows.append({"model": graph.source, "devices": n_devices, "seed": seed, "budget": budget,
                         "samples": s["samples"], "groups": s["groups"], "best_baseline": warm.source,
                         "best_baseline_s": baseline, "greedy_s": greedy, "best_s": s["best_sample_step_time"],
                         "random_s": searched[budget], "bound_s": bound, "entropy_per_group": s["entropy_per_group"],
                         "converged": s["converged"], "train_s": time.perf_counter() - started,
                         "samples_per_s": trained / (time.perf_counter() - leg) if trained else None})
    return rows


def throughput(graph, n_devices: int, samples: int = 2000) -> float:
    """Simulated samples per second of the training loop alone (sampling, simulator, updates,
    logging): a run from scratch, which does not settle within `samples`."""
    from placer.devices import parse_devices
    from placer.graph.grouping import group_graph
    from placer.costmodel.profile_cache import profiled_cost_model
    from placer.costmodel.simulator import SimulatedMeasurer
    from placer.policy.hparams import Hyperparameters
    from placer.policy.trainer import train

    devices = parse_devices(",".join(f"cpu:{i}[threads=1]" for i in range(n_devices)))
    measurer = SimulatedMeasurer(graph, [d.name for d in devices], profiled_cost_model(graph, devices))
    with tempfile.TemporaryDirectory() as run_dir:
        started = time.perf_counter()
        s = train(graph, measurer, group_graph(graph, None, n_devices), run_dir, Hyperparameters(), samples=samples,
                  seed=0).summary
        return s["samples"] / (time.perf_counter() - started)


def print_row(r: dict) -> None:
    b = r["best_baseline_s"]
    vs_random = r["random_s"] / r["greedy_s"] if r["greedy_s"] else float("nan")
    print(f"{Path(r['model']).stem:<13} {r['devices']:>3} {r['seed']:>4} {r['budget']:>6} {r['groups']:>6}  "
          f"{r['best_baseline']:<13} {b * 1e3:8.2f}  {r['greedy_s'] / b:6.3f} {r['best_s'] / b:6.3f} "
          f"{r['random_s'] / b:6.3f} {r['bound_s'] / b:6.3f}  {vs_random:9.3f}  {r['entropy_per_group']:8.3f}  "
          f"{r['train_s']:6.0f}  " + (f"{r['samples_per_s']:9.0f}" if r["samples_per_s"] else f"{'-':>9}"), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="inception_v3, resnet50, rnnlm; seed 0; 2000 and 8000")
    parser.add_argument("--models", nargs="+", default=None, choices=MODELS)
    parser.add_argument("--devices", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--seeds", nargs="+", type=int, default=None)
    parser.add_argument("--budgets", nargs="+", type=int, default=None)
    parser.add_argument("--cost-model", default="profiled", choices=["profiled", "analytic"])
    parser.add_argument("--out", default="benchmarks/results/learning.json")
    parser.add_argument("--throughput", action="store_true",
                        help="only the training loop's simulated samples per second (Inception-v3, from scratch)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.throughput:
        graph = zoo_graph("inception_v3")
        for n_devices in args.devices:
            print(f"inception_v3, {n_devices} devices: {throughput(graph, n_devices):.0f} simulated samples/s "
                  "(target >= 200)", flush=True)
        return 0
    models = args.models or (QUICK_MODELS if args.quick else MODELS)
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    budgets = sorted(args.budgets or ([2000, 8000] if args.quick else [500, 2000, 8000]))
    print(f"{'model':<13} {'dev':>3} {'seed':>4} {'budget':>6} {'groups':>6}  {'best baseline':<13} {'ms':>8}  "
          f"{'greedy':>6} {'best':>6} {'random':>6} {'bound':>6}  {'vs random':>9}  {'entropy':>8}  {'time s':>6}  {'samples/s':>9}")
    rows = []
    for name in models:
        graph = zoo_graph(name)
        for n_devices in args.devices:
            for seed in seeds:
                for row in run_one(graph, n_devices, seed, budgets, args.cost_model):
                    print_row(row)
                    rows.append(row)
    save_json(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
